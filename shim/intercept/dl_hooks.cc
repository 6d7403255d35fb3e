// dlsym/dlvsym interposition.
//
// glibc resolves dlsym(RTLD_NEXT, ...) and dlsym(RTLD_DEFAULT, ...) relative to
// its caller: RTLD_DEFAULT searches the global scope and then the caller's own
// RTLD_LOCAL group. For every name cdsa does not wrap, the hooks must therefore
// leave the caller unchanged: they end in a guaranteed tail call (a jmp, so the
// original return address is what the real dlsym sees). This file is compiled
// with sibling-call optimisation forced on and sanitizers and stack protectors
// off for exactly that reason; tests/e2e checks a second preload library
// resolving dlsym(RTLD_NEXT, "malloc") in either order, and a library resolving
// its own RTLD_LOCAL cudart with dlsym(RTLD_DEFAULT, ...).
//
// For the driver symbols cdsa wraps, the hook looks the name up itself and
// hands back cdsa's wrapper of what the program would have found without cdsa:
// with a handle, what the real dlsym finds there; with RTLD_DEFAULT, the first
// definition in the global scope that is not cdsa's own export, else the one in
// the caller's group.
#include <dlfcn.h>
#include <link.h>

#include "shim/common/driver.h"
#include "shim/intercept/interpose.h"
#include "shim/record/native_stack.h"

#include "base/export.h"

namespace {

inline bool maybe_driver_name(void* handle, const char* name) {
  return name && name[0] == 'c' && name[1] == 'u' && handle != RTLD_NEXT;
}

void* find(void* handle, const char* name, const char* version) {
  return version ? cdsa::real_dlvsym()(handle, name, version) : cdsa::real_dlsym()(handle, name);
}

bool ours(void* p) { return p && cdsa::pc_in_cdsa(reinterpret_cast<uintptr_t>(p)); }

// dlsym(RTLD_DEFAULT, name) as the caller would see it without cdsa.
void* find_default(const char* name, const char* version, void* caller) {
  void* p = find(RTLD_DEFAULT, name, version);  // the global scope (libcdsa's own group is in it)
  if (!ours(p)) return p;
  p = find(RTLD_NEXT, name, version);  // the global scope after libcdsa
  if (p) return p;
  // The caller's RTLD_LOCAL group: the caller's object and what it depends on.
  Dl_info info;
  link_map* map = nullptr;
  if (!dladdr1(caller, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) || !map || !map->l_name ||
      !map->l_name[0])
    return nullptr;  // the main program: its group is the global scope
  void* h = dlopen(map->l_name, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return nullptr;
  p = find(h, name, version);
  dlclose(h);
  return ours(p) ? nullptr : p;
}

__attribute__((noinline)) void* lookup_driver_symbol(void* handle, const char* name, const char* version,
                                                     void* caller) {
  void* real = handle == RTLD_DEFAULT ? find_default(name, version, caller) : find(handle, name, version);
  return cdsa::wrap_dlsym_result(handle, name, real);
}

}  // namespace

extern "C" CDSA_EXPORT void* dlsym(void* handle, const char* name) {
  if (__builtin_expect(maybe_driver_name(handle, name), 0) && cdsa::is_wrapped_symbol(name))
    return lookup_driver_symbol(handle, name, nullptr, __builtin_return_address(0));
  return cdsa::real_dlsym()(handle, name);  // tail call: the caller stays the caller
}

extern "C" CDSA_EXPORT void* dlvsym(void* handle, const char* name, const char* version) {
  if (__builtin_expect(maybe_driver_name(handle, name), 0) && cdsa::is_wrapped_symbol(name))
    return lookup_driver_symbol(handle, name, version, __builtin_return_address(0));
  return cdsa::real_dlvsym()(handle, name, version);  // tail call
}
