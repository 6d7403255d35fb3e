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

const KernelDesc* launchable_locked(CUfunction f, const char** name, CtxRef* ctx) {
  Sim& g = S();
  if (f == nullptr) return nullptr;
  auto* fn = reinterpret_cast<const Function*>(f);
  if (g.functions.count(fn)) {
    if (name != nullptr) *name = fn->name;
    if (ctx != nullptr) *ctx = fn->ctx;
    return fn->k;
  }
  auto* kernel = reinterpret_cast<const Kernel*>(f);
  if (g.kernels.count(kernel)) {
    if (name != nullptr) *name = kernel->name;
    if (ctx != nullptr) *ctx = CtxRef{};
    return kernel->k;
  }
  return nullptr;
}

namespace {

void release_function_locked(Function* f) {
  S().functions.erase(f);
  S().function_pool.release(f);
}

// A module's functions go back to the pool in the order they were first got.
void free_module_locked(Module& m) {
  for (Function* f : m.order) release_function_locked(f);
  m.order.clear();
  m.by_name.clear();
}

void free_library_locked(Library& l) {
  for (Kernel* k : l.order) {
    for (Function* f : k->functions) release_function_locked(f);
    S().kernels.erase(k);
    S().kernel_pool.release(k);
  }
  l.order.clear();
  l.by_name.clear();
}

}  // namespace

void free_ctx_functions_locked(const CUctx_st* c) {
  Sim& g = S();
  for (auto it = g.modules.begin(); it != g.modules.end();) {
    if (it->second->ctx.ctx == c && it->second->ctx.id == c->id) {
      free_module_locked(*it->second);
      it = g.modules.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [h, l] : g.libraries)
    for (Kernel* k : l->order)
      std::erase_if(k->functions, [&](Function* f) {
        if (f->ctx.ctx != c || f->ctx.id != c->id) return false;
        release_function_locked(f);
        return true;
      });
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

// The four loaders: `gate` (cuModule* need a current context, whose the module is), then null arguments, then, for
// a path, a readable file. An image holds every named kernel.
template <class Map>
CUresult load_image(Map Sim::*table, typename Map::key_type* out, const void* image_or_path, bool is_path,
                    CUresult (*gate)(), bool in_context) {
  CUresult r = gate();
  if (r != CUDA_SUCCESS) return r;
  if (out == nullptr || image_or_path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (is_path && !readable_file(static_cast<const char*>(image_or_path))) return CUDA_ERROR_FILE_NOT_FOUND;
  CtxRef ctx = in_context ? CtxRef::of(t_current) : CtxRef{};
  return create_handle(table, out, [&] {
    auto image = std::make_unique<typename Map::mapped_type::element_type>();
    image->ctx = ctx;
    return image;
  });
}

// cuModuleGetFunction, cuLibraryGetKernel: the handle for `name` in the module or library `owner`, made on first
// request (for a name find_kernel_desc knows, from the pool: maybe a freed handle's address) and listed in `live`,
// where launches and the name queries look. A module's call answers its context's state.
template <class Handle, class OwnerHandle, class Named>
CUresult get_named(Handle* out, std::unordered_map<OwnerHandle, std::unique_ptr<Image<Named>>> Sim::*owners,
                   OwnerHandle owner, std::unordered_set<const Named*> Sim::*live, Pool<Named> Sim::*pool,
                   const char* name) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = observe(ctx_of(owners, owner));
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
    Named* made = (g.*pool).make(k, intern_locked(name), image->ctx);
    (g.*live).insert(made);
    image->order.push_back(made);
    found = by_name.emplace(name, made).first;
  }
  *out = reinterpret_cast<Handle>(found->second);
  return CUDA_SUCCESS;
}

// cuFuncGetName, cuKernelGetName: each names its own handle kind only; the other -> CUDA_ERROR_INVALID_HANDLE, as
// on the real driver. A CUfunction's call answers its context's state.
template <class Named, class Handle>
CUresult get_name(const char** name, Handle h, std::unordered_set<const Named*> Sim::*live) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUctx_st* c = t_current;
  if constexpr (std::is_same_v<Named, Function>) {
    Lock lk(S().mu);
    auto* f = reinterpret_cast<const Function*>(h);
    if (h != nullptr && S().functions.count(f)) c = f->ctx.ctx;
  }
  CUresult r = observe(c);
  if (r != CUDA_SUCCESS) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  auto* named = reinterpret_cast<const Named*>(h);
  if (h == nullptr || !(S().*live).count(named)) return CUDA_ERROR_INVALID_HANDLE;
  *name = named->name;
  return CUDA_SUCCESS;
}

}  // namespace

}  // namespace sim

using namespace sim;

// ---- modules and functions (each of the context current at the load)

SIM_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return load_image(&Sim::modules, module, image, false, enter_ctx, true);
}

// A cubin on disk (Inductor's static launcher): any readable file is an image
// holding every named kernel; missing or unreadable -> CUDA_ERROR_FILE_NOT_FOUND.
SIM_API CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  return load_image(&Sim::modules, module, fname, true, enter_ctx, true);
}

// Its functions are freed (their addresses go back to the pool): cuFuncGetName and launches refuse them.
SIM_API CUresult cuModuleUnload(CUmodule hmod) {
  return destroy_handle(&Sim::modules, hmod, [](Sim&, Module& m) { free_module_locked(m); });
}

SIM_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  return get_named(hfunc, &Sim::modules, hmod, &Sim::functions, &Sim::function_pool, name);
}

SIM_API CUresult cuFuncGetName(const char** name, CUfunction hfunc) { return get_name(name, hfunc, &Sim::functions); }

// ---- libraries and CUkernel handles (context-independent: "the context-less kernel CUkernel", cuda.h)

SIM_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                   void** libraryOptionValues, unsigned int numLibraryOptions) {
  return load_image(&Sim::libraries, library, code, false, enter, false);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                       void** jitOptionsValues, unsigned int numJitOptions,
                                       CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                       unsigned int numLibraryOptions) {
  return load_image(&Sim::libraries, library, fileName, true, enter, false);
}

SIM_API CUresult cuLibraryUnload(CUlibrary library) {
  return destroy_handle(&Sim::libraries, library, [](Sim&, Library& l) { free_library_locked(l); });
}

SIM_API CUresult cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  return get_named(pKernel, &Sim::libraries, library, &Sim::kernels, &Sim::kernel_pool, name);
}

SIM_API CUresult cuKernelGetName(const char** name, CUkernel hfunc) { return get_name(name, hfunc, &Sim::kernels); }

// "the handle of the function for the requested kernel and the current context" (cuda.h): one per kernel and
// context incarnation, the same handle every time; freed with its context (or its library).
SIM_API CUresult cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto* k = reinterpret_cast<Kernel*>(kernel);
  if (kernel == nullptr || !g.kernels.count(k)) return CUDA_ERROR_INVALID_HANDLE;
  CtxRef here = CtxRef::of(t_current);
  for (Function* f : k->functions)
    if (f->ctx.ctx == here.ctx && f->ctx.id == here.id) {
      *pFunc = reinterpret_cast<CUfunction>(f);
      return CUDA_SUCCESS;
    }
  Function* f = g.function_pool.make(k->k, k->name, here);
  g.functions.insert(f);
  k->functions.push_back(f);
  *pFunc = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}
