// The C library's own functions, found by reading libc's ELF dynamic symbol
// table (reached from the loader's object list, _r_debug): never through dlsym,
// which cdsa interposes, nor through any function a sanitizer intercepts.
//
// Contract: thread-safe, no allocation, no lock of cdsa's; usable before a
// sanitizer runtime is ready (libc_symbols.cc is compiled without sanitizers).
// `libc_function(name)` walks the symbol table on every call; `real_libc(slot,
// name)` does it once and keeps the result in `slot`, for hooks that forward to
// libc on every call:
//
//   static std::atomic<int (*)(FILE*, const char*, va_list)> real_vfprintf{nullptr};
//   return real_libc(real_vfprintf, "vfprintf")(f, fmt, ap);
//
// Hooks that interpose a libc function forward to the *next* definition instead (next_libc), which is libc's
// unless another interposer was loaded after cdsa.
#pragma once

#include <atomic>

namespace cdsa {

// String compares of their own, for code a sanitizer runtime reaches before it can serve strcmp/strstr (the libc
// lookup here, the pass-through thunks' registry): always inlined, for the reason cached_function below is.
[[gnu::always_inline]] inline bool same_text(const char* a, const char* b) noexcept {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
[[gnu::always_inline]] inline bool contains_text(const char* hay, const char* needle) noexcept {
  for (; *hay; ++hay) {
    const char *h = hay, *n = needle;
    while (*n && *h == *n) ++h, ++n;
    if (!*n) return true;
  }
  return false;
}

// libc's `name` (versioned GLIBC_2.34, else GLIBC_2.2.5, else any), or null.
void* libc_function(const char* name) noexcept;

// The next definition of `name` after libcdsa.so in the lookup order: what libc's dlsym(RTLD_NEXT, name) gives
// when libcdsa.so itself asks (another interposer loaded after cdsa, else libc's own), or libc's `name` where that
// finds nothing. What cdsa's libc hooks forward to, so a hook loaded after cdsa still sees every call.
void* next_function(const char* name) noexcept;

// `lookup(name)` as an `F`, looked up on the first call and kept in `slot`. Two threads racing on the first call
// both look it up and store the same pointer. Inlined at every call: libc_symbols.cc (the dlsym path) is built
// without sanitizers, and no shared out-of-line copy may come from an instrumented file.
template <typename F>
[[gnu::always_inline]] inline F cached_function(std::atomic<F>& slot, const char* name,
                                                void* (*lookup)(const char*) noexcept) noexcept {
  F f = slot.load(std::memory_order_acquire);
  if (__builtin_expect(f == nullptr, 0)) {
    f = reinterpret_cast<F>(lookup(name));
    slot.store(f, std::memory_order_release);
  }
  return f;
}

// libc's `name` as an `F` (libc_function), kept in `slot`.
template <typename F>
[[gnu::always_inline]] inline F real_libc(std::atomic<F>& slot, const char* name) noexcept {
  return cached_function(slot, name, libc_function);
}

// `next_function(name)` as an `F`, kept in `slot` (as real_libc). The hooks' slots are filled in libcdsa.so's
// constructor (prepare_next_functions), so a hook never looks up on a later call.
template <typename F>
[[gnu::always_inline]] inline F next_libc(std::atomic<F>& slot, const char* name) noexcept {
  return cached_function(slot, name, next_function);
}

}  // namespace cdsa
