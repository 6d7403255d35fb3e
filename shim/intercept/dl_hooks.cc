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
// Every lookup cdsa does not answer with its own wrapper goes to the *next*
// dlsym in the chain (next_dlsym: what dlsym(RTLD_NEXT, "dlsym") gives
// libcdsa.so), never straight to libc's: another interposer loaded after cdsa
// (a GPU-sharing hook, which answers cu* lookups with its own hooks) keeps
// seeing every lookup. The tail call makes that hook see the program as caller.
//
// For the driver symbols cdsa wraps, the hook looks the name up itself, through
// the same next dlsym, and hands back cdsa's wrapper of what the program would
// have found without cdsa: with a handle, what the next dlsym finds there (so a
// hook after cdsa gets its own hook wrapped: cdsa -> hook -> libcuda); with
// RTLD_DEFAULT, the first definition in the global scope that is not cdsa's own
// export, else the one in the caller's group.
//
// Symbol versions: libcdsa.so exports both hooks as dlsym@@GLIBC_2.34 (the
// version script, shim/exports.map.in) and dlsym@GLIBC_2.2.5 (a jump here,
// shim/entry.cc), dlvsym alike, as glibc exports them, so a hook loaded before
// cdsa that finds "the real dlsym" with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5")
// finds cdsa's, not libc's.
#include <dlfcn.h>
#include <link.h>

#include "shim/common/driver.h"
#include "shim/intercept/interpose.h"
#include "shim/stacks/native_stack.h"

#include "base/export.h"

namespace {

inline bool maybe_driver_name(void* handle, const char* name) {
  return name && name[0] == 'c' && name[1] == 'u' && handle != RTLD_NEXT;
}

// What the rest of the chain finds for `name` in `handle`. RTLD_NEXT is cdsa's own question (the definition after
// libcdsa.so): libc's dlsym answers it relative to this caller; another hook's dlsym would answer it relative to
// that hook.
void* find(void* handle, const char* name, const char* version) {
  if (handle == RTLD_NEXT)
    return version ? cdsa::real_dlvsym()(handle, name, version) : cdsa::real_dlsym()(handle, name);
  return version ? cdsa::next_dlvsym()(handle, name, version) : cdsa::next_dlsym()(handle, name);
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
  return cdsa::next_dlsym()(handle, name);  // tail call: the caller stays the caller
}

extern "C" CDSA_EXPORT void* dlvsym(void* handle, const char* name, const char* version) {
  if (__builtin_expect(maybe_driver_name(handle, name), 0) && cdsa::is_wrapped_symbol(name))
    return lookup_driver_symbol(handle, name, version, __builtin_return_address(0));
  return cdsa::next_dlvsym()(handle, name, version);  // tail call
}

// The hooks' own addresses, for the GLIBC_2.2.5 entries of libcdsa.so (shim/entry.cc jumps here: through the
// exported name it would reach the first dlsym in the global scope, perhaps a hook that called it).
extern "C" [[gnu::visibility("hidden")]] decltype(dlsym) cdsa_dlsym_local __attribute__((alias("dlsym"), copy(dlsym)));
extern "C" [[gnu::visibility("hidden")]] decltype(dlvsym) cdsa_dlvsym_local
    __attribute__((alias("dlvsym"), copy(dlvsym)));
