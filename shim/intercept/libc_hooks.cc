// The stdio, write and dlclose hooks (libc_hooks.h; their table: libc_hooks.def). dlsym and dlvsym are dl_hooks.cc.
#include "shim/intercept/libc_hooks.h"

#include <dlfcn.h>
#include <unistd.h>
#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "shim/common/libc_symbols.h"
#include "shim/record/assert_capture.h"
#include "shim/stacks/native_stack.h"

#include "base/export.h"

namespace cdsa {
namespace {
// The next definition of each hook with a slot of its own (libc's, or another interposer's loaded after cdsa),
// filled in the constructor (prepare_libc_hooks).
#define CDSA_LIBC_HOOK(name, node, type) std::atomic<type> g_next_##name{nullptr};
#define CDSA_LIBC_HOOK_VIA(name, node, type, via)
#define CDSA_DL_HOOK(name, type)
#include "shim/intercept/libc_hooks.def"
#undef CDSA_LIBC_HOOK
#undef CDSA_LIBC_HOOK_VIA
#undef CDSA_DL_HOOK
}  // namespace

void prepare_libc_hooks() noexcept {
#define CDSA_LIBC_HOOK(name, node, type) (void)next_libc(g_next_##name, #name);
#define CDSA_LIBC_HOOK_VIA(name, node, type, via)
#define CDSA_DL_HOOK(name, type)
#include "shim/intercept/libc_hooks.def"
#undef CDSA_LIBC_HOOK
#undef CDSA_LIBC_HOOK_VIA
#undef CDSA_DL_HOOK
}

const char* const* stdio_hook_names(size_t* count) noexcept {
  static const char* const kNames[] = {
#define CDSA_LIBC_HOOK(name, node, type) #name,
#define CDSA_LIBC_HOOK_VIA(name, node, type, via) #name,
#define CDSA_DL_HOOK(name, type)
#include "shim/intercept/libc_hooks.def"
#undef CDSA_LIBC_HOOK
#undef CDSA_LIBC_HOOK_VIA
#undef CDSA_DL_HOOK
  };
  *count = sizeof kNames / sizeof kNames[0];
  return kNames;
}
}  // namespace cdsa

using cdsa::capturing;
using cdsa::next_libc;

// Declares `next`, the next definition of `name` (its slot's type: the table's).
#define CDSA_REAL(name) const auto next = next_libc(cdsa::g_next_##name, #name)

extern "C" {

CDSA_EXPORT int vfprintf(FILE* f, const char* fmt, va_list ap) {
  CDSA_REAL(vfprintf);
  if (__builtin_expect(capturing(f), 0)) cdsa::capture_format(fmt, ap);
  return next(f, fmt, ap);
}

CDSA_EXPORT int fprintf(FILE* f, const char* fmt, ...) {
  CDSA_REAL(vfprintf);
  va_list ap;
  va_start(ap, fmt);
  if (__builtin_expect(capturing(f), 0)) cdsa::capture_format(fmt, ap);
  int r = next(f, fmt, ap);
  va_end(ap);
  return r;
}

CDSA_EXPORT int __vfprintf_chk(FILE* f, int flag, const char* fmt, va_list ap) {
  CDSA_REAL(__vfprintf_chk);
  if (__builtin_expect(capturing(f), 0)) cdsa::capture_format(fmt, ap);
  return next(f, flag, fmt, ap);
}

CDSA_EXPORT int __fprintf_chk(FILE* f, int flag, const char* fmt, ...) {
  CDSA_REAL(__vfprintf_chk);
  va_list ap;
  va_start(ap, fmt);
  if (__builtin_expect(capturing(f), 0)) cdsa::capture_format(fmt, ap);
  int r = next(f, flag, fmt, ap);
  va_end(ap);
  return r;
}

CDSA_EXPORT int vdprintf(int fd, const char* fmt, va_list ap) {
  CDSA_REAL(vdprintf);
  if (__builtin_expect(fd == 2 && cdsa::tl_driver_call_depth > 0, 0)) cdsa::capture_format(fmt, ap);
  return next(fd, fmt, ap);
}

CDSA_EXPORT int dprintf(int fd, const char* fmt, ...) {
  CDSA_REAL(vdprintf);
  va_list ap;
  va_start(ap, fmt);
  if (__builtin_expect(fd == 2 && cdsa::tl_driver_call_depth > 0, 0)) cdsa::capture_format(fmt, ap);
  int r = next(fd, fmt, ap);
  va_end(ap);
  return r;
}

CDSA_EXPORT int fputs(const char* s, FILE* f) {
  CDSA_REAL(fputs);
  if (__builtin_expect(capturing(f), 0)) cdsa::capture_stderr_bytes(s, strlen(s));
  return next(s, f);
}

CDSA_EXPORT int fputs_unlocked(const char* s, FILE* f) {
  CDSA_REAL(fputs_unlocked);
  if (__builtin_expect(capturing(f), 0)) cdsa::capture_stderr_bytes(s, strlen(s));
  return next(s, f);
}

CDSA_EXPORT size_t fwrite(const void* p, size_t size, size_t n, FILE* f) {
  CDSA_REAL(fwrite);
  if (__builtin_expect(capturing(f), 0)) cdsa::capture_stderr_bytes(p, size * n);
  return next(p, size, n, f);
}

CDSA_EXPORT size_t fwrite_unlocked(const void* p, size_t size, size_t n, FILE* f) {
  CDSA_REAL(fwrite_unlocked);
  if (__builtin_expect(capturing(f), 0)) cdsa::capture_stderr_bytes(p, size * n);
  return next(p, size, n, f);
}

#define CDSA_PUTC_HOOK(name)                                      \
  CDSA_EXPORT int name(int c, FILE* f) {                          \
    CDSA_REAL(name);                                              \
    if (__builtin_expect(capturing(f), 0)) cdsa::capture_char(c); \
    return next(c, f);                                            \
  }
CDSA_PUTC_HOOK(fputc)
CDSA_PUTC_HOOK(putc)
CDSA_PUTC_HOOK(_IO_putc)
CDSA_PUTC_HOOK(fputc_unlocked)
CDSA_PUTC_HOOK(putc_unlocked)
#undef CDSA_PUTC_HOOK

CDSA_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  CDSA_REAL(write);
  if (fd == 2) cdsa::capture_stderr_bytes(buf, n);
  return next(fd, buf, n);
}

// Counts unloads for the native stack cache (shim/stacks/native_stack.h); otherwise exactly the real dlclose.
// Forwards to the next dlclose (another interposer's after cdsa, else libc's), looked up from here: a
// dlsym(RTLD_NEXT) through the dlsym chain could be answered relative to a hook before cdsa, which is cdsa.
CDSA_EXPORT int dlclose(void* handle) {
  using DlcloseFn = int (*)(void*);
  static DlcloseFn real = reinterpret_cast<DlcloseFn>(cdsa::next_function("dlclose"));
  if (!real) return -1;
  const uint64_t before = cdsa::native_unload_begin();
  int rc = real(handle);
  cdsa::native_unload_end(before);
  return rc;
}

}  // extern "C"

// Its own address, for libcdsa.so's dlclose@GLIBC_2.2.5 (shim/entry.cc; the name itself is dlclose@@GLIBC_2.34).
extern "C" [[gnu::visibility("hidden")]] decltype(dlclose) cdsa_dlclose_local
    __attribute__((alias("dlclose"), copy(dlclose)));

// Each hook has the type the table gives it (libc_hooks.def's type column): each address initialises a pointer of
// that type, or the build stops.
namespace {
#define CDSA_LIBC_HOOK(name, node, type) [[maybe_unused]] constexpr std::type_identity_t<type> kTableType_##name = &::name;
#define CDSA_LIBC_HOOK_VIA(name, node, type, via) CDSA_LIBC_HOOK(name, node, type)
#define CDSA_DL_HOOK(name, type) CDSA_LIBC_HOOK(name, DL, type)
#include "shim/intercept/libc_hooks.def"
#undef CDSA_LIBC_HOOK
#undef CDSA_LIBC_HOOK_VIA
#undef CDSA_DL_HOOK
}  // namespace
