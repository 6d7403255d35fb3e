// dlsym/dlvsym interposition.
//
// glibc resolves dlsym(RTLD_NEXT, ...) relative to its caller's address. For
// every name cdsa does not wrap, the hooks must therefore leave the caller
// unchanged: they end in a guaranteed tail call (a jmp, so the original return
// address is what the real dlsym sees). This file is compiled with sibling-call
// optimisation forced on and sanitizers and stack protectors off for exactly
// that reason; tests/e2e checks a second preload library resolving
// dlsym(RTLD_NEXT, "malloc") in either order.
#include <dlfcn.h>

#include "shim/driver.h"
#include "shim/interpose.h"

#define CDSA_EXPORT __attribute__((visibility("default")))

namespace {

inline bool is_driver_name(void* handle, const char* name) {
  return name && name[0] == 'c' && name[1] == 'u' && handle != RTLD_NEXT;
}

__attribute__((noinline)) void* lookup_driver_symbol(void* handle, const char* name) {
  return cdsa::wrap_dlsym_result(handle, name, cdsa::real_dlsym()(handle, name));
}

__attribute__((noinline)) void* lookup_driver_vsymbol(void* handle, const char* name, const char* version) {
  return cdsa::wrap_dlsym_result(handle, name, cdsa::real_dlvsym()(handle, name, version));
}

}  // namespace

extern "C" CDSA_EXPORT void* dlsym(void* handle, const char* name) {
  if (__builtin_expect(is_driver_name(handle, name), 0)) return lookup_driver_symbol(handle, name);
  return cdsa::real_dlsym()(handle, name);  // tail call: the caller stays the caller
}

extern "C" CDSA_EXPORT void* dlvsym(void* handle, const char* name, const char* version) {
  if (__builtin_expect(is_driver_name(handle, name), 0)) return lookup_driver_vsymbol(handle, name, version);
  return cdsa::real_dlvsym()(handle, name, version);  // tail call
}
