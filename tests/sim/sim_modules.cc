// cdsa simulated CUDA driver (tests only): modules, libraries, functions and
// CUkernel handles. See README.md for the contract and sim_internal.h for the
// shared state.
//
// Handle kinds, as in the real driver (cudart 12+/13 launches the CUkernel
// from cuLibraryGetKernel cast to CUfunction; cuFuncGetName rejects it):
//   CUfunction  cuModuleGetFunction, cuKernelGetFunction   -> cuFuncGetName names it
//   CUkernel    cuLibraryGetKernel                         -> cuKernelGetName names it
// Both launch with cuLaunchKernel[Ex] / cuLaunchCooperativeKernel.

#include <fcntl.h>

#include "sim_internal.h"

namespace sim {

const KernelDesc* find_kernel_desc(const char* name) {
  const KernelDesc* k = nullptr;
  for (const KernelDesc& d : kKernels)
    if (strcmp(d.name, name) == 0) return &d;
  for (const KernelDesc& d : kKernels)  // e.g. a mangled name: the longest kernel name it contains
    if (strstr(name, d.name) != nullptr && (k == nullptr || strlen(d.name) > strlen(k->name))) k = &d;
  return k;
}

const KernelDesc* launchable_locked(CUfunction f) {
  Sim& g = S();
  if (f == nullptr) return nullptr;
  auto* fn = reinterpret_cast<const Function*>(f);
  if (g.functions.count(fn)) return fn->k;
  auto* kernel = reinterpret_cast<const Kernel*>(f);
  if (g.kernels.count(kernel)) return kernel->k;
  return nullptr;
}

namespace {

// A path names an image if it is a readable file (its bytes are not looked at).
bool readable_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char c;
  ssize_t n = read(fd, &c, 1);  // EISDIR for a directory
  close(fd);
  return n >= 0;
}

// The four loaders: `gate` (cuModule* need a current context), then null arguments, then, for a path, a readable
// file. An image holds every named kernel.
template <class Map>
CUresult load_image(Map Sim::*table, typename Map::key_type* out, const void* image_or_path, bool is_path,
                    CUresult (*gate)()) {
  CUresult r = gate();
  if (r != CUDA_SUCCESS) return r;
  if (out == nullptr || image_or_path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (is_path && !readable_file(static_cast<const char*>(image_or_path))) return CUDA_ERROR_FILE_NOT_FOUND;
  return create_handle(table, out);
}

// cuModuleGetFunction, cuLibraryGetKernel: the handle for `name` in the module or library `owner`, made on first
// request (for a name find_kernel_desc knows) and listed in `live`, where launches and the name queries look.
template <class Handle, class OwnerHandle, class Named>
CUresult get_named(Handle* out, std::unordered_map<OwnerHandle, std::unique_ptr<Image<Named>>> Sim::*owners,
                   OwnerHandle owner, std::unordered_set<const Named*> Sim::*live, const char* name) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  Image<Named>* image = find_locked(owners, owner);
  if (image == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto& by_name = image->by_name;
  auto found = by_name.find(name);
  if (found == by_name.end()) {
    const KernelDesc* k = find_kernel_desc(name);
    if (k == nullptr) return CUDA_ERROR_NOT_FOUND;
    auto made = std::make_unique<Named>(k, name);
    (g.*live).insert(made.get());
    found = by_name.emplace(name, std::move(made)).first;
  }
  *out = reinterpret_cast<Handle>(found->second.get());
  return CUDA_SUCCESS;
}

// cuFuncGetName, cuKernelGetName: each names its own handle kind only; the other -> CUDA_ERROR_INVALID_HANDLE, as
// on the real driver.
template <class Named, class Handle>
CUresult get_name(const char** name, Handle h, std::unordered_set<const Named*> Sim::*live) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  auto* named = reinterpret_cast<const Named*>(h);
  if (h == nullptr || !(S().*live).count(named)) return CUDA_ERROR_INVALID_HANDLE;
  *name = named->name.c_str();
  return CUDA_SUCCESS;
}

}  // namespace

}  // namespace sim

using namespace sim;

// ---- modules and functions

SIM_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return load_image(&Sim::modules, module, image, false, enter_ctx);
}

// A cubin on disk (Inductor's static launcher): any readable file is an image
// holding every named kernel; missing or unreadable -> CUDA_ERROR_FILE_NOT_FOUND.
SIM_API CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  return load_image(&Sim::modules, module, fname, true, enter_ctx);
}

SIM_API CUresult cuModuleUnload(CUmodule hmod) {
  return destroy_handle(&Sim::modules, hmod, [](Sim& g, Module& m) {
    for (auto& [name, f] : m.by_name) g.functions.erase(f.get());
  });
}

SIM_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  return get_named(hfunc, &Sim::modules, hmod, &Sim::functions, name);
}

SIM_API CUresult cuFuncGetName(const char** name, CUfunction hfunc) { return get_name(name, hfunc, &Sim::functions); }

// ---- libraries and CUkernel handles (context-independent loading)

SIM_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                   void** libraryOptionValues, unsigned int numLibraryOptions) {
  return load_image(&Sim::libraries, library, code, false, enter);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                       void** jitOptionsValues, unsigned int numJitOptions,
                                       CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                       unsigned int numLibraryOptions) {
  return load_image(&Sim::libraries, library, fileName, true, enter);
}

SIM_API CUresult cuLibraryUnload(CUlibrary library) {
  return destroy_handle(&Sim::libraries, library, [](Sim& g, Library& l) {
    for (auto& [name, k] : l.by_name) {
      g.kernels.erase(k.get());
      if (k->function) g.functions.erase(k->function.get());
    }
  });
}

SIM_API CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  return get_named(pKernel, &Sim::libraries, library, &Sim::kernels, name);
}

SIM_API CUresult cuKernelGetName(const char** name, CUkernel hfunc) { return get_name(name, hfunc, &Sim::kernels); }

// The kernel's CUfunction in the current context (cuBLASLt's path): the same
// handle every time; cuFuncGetName names it.
SIM_API CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto* k = reinterpret_cast<Kernel*>(kernel);
  if (kernel == nullptr || !g.kernels.count(k)) return CUDA_ERROR_INVALID_HANDLE;
  if (!k->function) {
    k->function = std::make_unique<Function>(k->k, k->name);
    g.functions.insert(k->function.get());
  }
  *pFunc = reinterpret_cast<CUfunction>(k->function.get());
  return CUDA_SUCCESS;
}
