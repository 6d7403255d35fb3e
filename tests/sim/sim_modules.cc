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

CUresult new_module(CUmodule* module) {
  Sim& g = S();
  Lock lk(g.mu);
  auto m = std::make_unique<Module>();
  auto h = reinterpret_cast<CUmodule>(m.get());
  g.modules.emplace(h, std::move(m));
  *module = h;
  return CUDA_SUCCESS;
}

CUresult new_library(CUlibrary* library) {
  Sim& g = S();
  Lock lk(g.mu);
  auto l = std::make_unique<Library>();
  auto h = reinterpret_cast<CUlibrary>(l.get());
  g.libraries.emplace(h, std::move(l));
  *library = h;
  return CUDA_SUCCESS;
}

// A path names an image if it is a readable file (its bytes are not looked at).
bool readable_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char c;
  ssize_t n = read(fd, &c, 1);  // EISDIR for a directory
  close(fd);
  return n >= 0;
}

}  // namespace

}  // namespace sim

using namespace sim;

// ---- modules and functions

SIM_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return new_module(module);
}

// A cubin on disk (Inductor's static launcher): any readable file is an image
// holding every named kernel; missing or unreadable -> CUDA_ERROR_FILE_NOT_FOUND.
SIM_API CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (module == nullptr || fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!readable_file(fname)) return CUDA_ERROR_FILE_NOT_FOUND;
  return new_module(module);
}

SIM_API CUresult cuModuleUnload(CUmodule hmod) {
  return destroy_handle(&Sim::modules, hmod, [](Sim& g, Module& m) {
    for (auto& [name, f] : m.functions) g.functions.erase(f.get());
  });
}

SIM_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto it = g.modules.find(hmod);
  if (it == g.modules.end()) return CUDA_ERROR_INVALID_HANDLE;
  Module& m = *it->second;
  auto f = m.functions.find(name);
  if (f == m.functions.end()) {
    const KernelDesc* k = find_kernel_desc(name);
    if (k == nullptr) return CUDA_ERROR_NOT_FOUND;
    auto fn = std::make_unique<Function>(Function{k, name});
    g.functions.insert(fn.get());
    f = m.functions.emplace(name, std::move(fn)).first;
  }
  *hfunc = reinterpret_cast<CUfunction>(f->second.get());
  return CUDA_SUCCESS;
}

// CUfunction handles only: a CUkernel -> CUDA_ERROR_INVALID_HANDLE, as on the real driver.
SIM_API CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  auto* fn = reinterpret_cast<const Function*>(hfunc);
  if (hfunc == nullptr || !S().functions.count(fn)) return CUDA_ERROR_INVALID_HANDLE;
  *name = fn->name.c_str();
  return CUDA_SUCCESS;
}

// ---- libraries and CUkernel handles (context-independent loading)

SIM_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                   void** libraryOptionValues, unsigned int numLibraryOptions) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return new_library(library);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                       void** jitOptionsValues, unsigned int numJitOptions,
                                       CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                       unsigned int numLibraryOptions) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (library == nullptr || fileName == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!readable_file(fileName)) return CUDA_ERROR_FILE_NOT_FOUND;
  return new_library(library);
}

SIM_API CUresult cuLibraryUnload(CUlibrary library) {
  return destroy_handle(&Sim::libraries, library, [](Sim& g, Library& l) {
    for (auto& [name, k] : l.kernels) {
      g.kernels.erase(k.get());
      if (k->function) g.functions.erase(k->function.get());
    }
  });
}

SIM_API CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto it = g.libraries.find(library);
  if (it == g.libraries.end()) return CUDA_ERROR_INVALID_HANDLE;
  Library& l = *it->second;
  auto k = l.kernels.find(name);
  if (k == l.kernels.end()) {
    const KernelDesc* desc = find_kernel_desc(name);
    if (desc == nullptr) return CUDA_ERROR_NOT_FOUND;
    auto kernel = std::make_unique<Kernel>(Kernel{desc, name, nullptr});
    g.kernels.insert(kernel.get());
    k = l.kernels.emplace(name, std::move(kernel)).first;
  }
  *pKernel = reinterpret_cast<CUkernel>(k->second.get());
  return CUDA_SUCCESS;
}

// CUkernel handles only: a CUfunction -> CUDA_ERROR_INVALID_HANDLE.
SIM_API CUresult cuKernelGetName(const char** name, CUkernel hfunc) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  auto* k = reinterpret_cast<const Kernel*>(hfunc);
  if (hfunc == nullptr || !S().kernels.count(k)) return CUDA_ERROR_INVALID_HANDLE;
  *name = k->name.c_str();
  return CUDA_SUCCESS;
}

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
    k->function = std::make_unique<Function>(Function{k->k, k->name});
    g.functions.insert(k->function.get());
  }
  *pFunc = reinterpret_cast<CUfunction>(k->function.get());
  return CUDA_SUCCESS;
}
