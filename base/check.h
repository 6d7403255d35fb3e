// CDSA_DCHECK(cond): an invariant check that is on in sanitizer builds (-DCDSA_SANITIZE=address or thread, which
// CI runs: CMakeLists.txt defines CDSA_DCHECK_ON there) and in any build compiled with -DCDSA_DCHECK_ON, and costs
// nothing otherwise: in a release build the condition is not evaluated, only type-checked.
//
// A failed check writes one line to fd 2 with write(2) ("cdsa: internal check failed: FILE:LINE: COND") and
// aborts, so the sanitizer run stops at the broken invariant with its stack. No allocation, no lock, no stdio:
// usable on the launch path and in a signal handler. For invariants of cdsa's own state only, never for input
// (a bad value from the program, the driver or a file gets a message, not an abort).
//
//   CDSA_DCHECK(r.seq != 0);  // shim/record/recorder.cc: the ring's slots are addressed by seq - 1
#pragma once

#include <unistd.h>
#include <cstdlib>
#include <cstring>

#if defined(CDSA_DCHECK_ON) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CDSA_DCHECK_ENABLED 1
#else
#define CDSA_DCHECK_ENABLED 0
#endif

namespace cdsa::base {

[[noreturn, gnu::cold, gnu::noinline]] inline void dcheck_failed(const char* what) noexcept {
  static const char kHead[] = "cdsa: internal check failed: ";
  (void)!::write(2, kHead, sizeof kHead - 1);
  (void)!::write(2, what, strlen(what));
  (void)!::write(2, "\n", 1);
  abort();
}

}  // namespace cdsa::base

#define CDSA_DCHECK_STR2(x) #x
#define CDSA_DCHECK_STR(x) CDSA_DCHECK_STR2(x)
#if CDSA_DCHECK_ENABLED
#define CDSA_DCHECK(cond)                                                                    \
  do {                                                                                       \
    if (__builtin_expect(!(cond), 0))                                                        \
      ::cdsa::base::dcheck_failed(__FILE__ ":" CDSA_DCHECK_STR(__LINE__) ": " #cond);        \
  } while (0)
#else
#define CDSA_DCHECK(cond)   \
  do {                      \
    (void)sizeof(!(cond));  \
  } while (0)
#endif
