// Captures the device's assert text (base/device_assert.h: the line's format, its marker and its parser) as
// the driver writes it to stderr, without touching the program's stderr.
//
// How: the real libcuda prints the lines through stdio (fprintf, vfprintf, fputs,
// fwrite, fputc, putc, _IO_putc, the _chk variants), and glibc's stdio writes with
// its internal __write, which an interposed write(2) never sees. So libcdsa.so
// interposes those stdio functions and write(2) (shim/intercept/libc_hooks.def and
// libc_hooks.cc; under RTLD_DEEPBIND, driver_stdio.cc binds libcuda's imports to
// them). While a thread is inside a wrapped driver call (DriverCallScope), what
// that call prints to stderr (fd 2) is handed here (capture_stderr_bytes and its
// two siblings below) and copied into a small per-thread buffer; every call is
// still forwarded to the real function with its own arguments, so the program's
// stderr bytes are exactly what they would be without cdsa. Outside driver calls
// a hook is one thread-local test and a jump.
//
// As soon as a thread's buffer holds a whole assert line it is published for
// the process (kept_device_text), so the fault report can read it whichever
// thread printed it, even while that thread's driver call is still running.
//
// Contract: DriverCallScope is allocation-free and lock-free after a thread's
// first driver call. `captured_driver_stderr` returns what this thread's current
// driver call wrote to fd 2 (up to 8 KiB) and has not published.
#pragma once

#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <string>

#include "shim/common/thread_slots.h"

namespace cdsa {

// Nesting depth of DriverCallScope on this thread (initial-exec TLS: no call to read it).
extern __thread int tl_driver_call_depth __attribute__((tls_model("initial-exec")));
// The outermost call's captured bytes (in a buffer mapped on first capture) and how many of them it published.
extern __thread size_t tl_capture_len __attribute__((tls_model("initial-exec")));
extern __thread size_t tl_capture_published __attribute__((tls_model("initial-exec")));

// Inline: entering and leaving a call that printed nothing is a few TLS loads and stores and the busy mark.
struct DriverCallScope {
  DriverCallScope() noexcept {
    if (tl_driver_call_depth++ == 0) {
      tl_capture_len = 0;
      tl_capture_published = 0;
      mark_driver_call(1);
    }
  }
  ~DriverCallScope() {
    if (--tl_driver_call_depth != 0) return;
    if (__builtin_expect(tl_capture_len != 0, 0)) leave_slow();  // it printed (published <= len)
    mark_driver_call(0);
  }
  DriverCallScope(const DriverCallScope&) = delete;
  DriverCallScope& operator=(const DriverCallScope&) = delete;

 private:
  static void leave_slow() noexcept;  // the printed text: kept if it holds the device's assert, published text final
};
// Whether this thread is inside a wrapped driver call: a wrapper reached from inside another (a second driver
// layer resolving libcuda with dlsym) passes straight through.
// (A second depth beside InCdsa's on purpose: shim/common/reentrancy.h says why one cannot serve both.)
inline bool in_driver_call() noexcept { return tl_driver_call_depth > 0; }

std::string captured_driver_stderr();
// Text printed by a driver call that cdsa itself made (a breadcrumb write that
// met the fault first): kept until the report. Thread-safe; keeps the first.
void keep_device_text(const std::string& text);
std::string kept_device_text();
// Waits until some thread has published the device's assert text, at most until
// `deadline`, and only while another thread is inside a driver call (the one
// that may be printing it). True when text is there. For the fault path: a 710
// with no text yet may wait a few hundred ms for a concurrent call's print.
bool wait_for_device_text(std::chrono::steady_clock::time_point deadline) noexcept;

// ---- what the stdio and write hooks (shim/intercept/libc_hooks.cc) hand over ----
// Only evaluated inside a driver call (the hooks test it first): whether `f` writes to fd 2.
inline bool capturing(FILE* f) noexcept {
  return tl_driver_call_depth > 0 && f && (f == stderr || fileno_unlocked(f) == 2);
}
// Bytes written to fd 2: copied when this thread is inside a driver call (else nothing happens).
void capture_stderr_bytes(const void* buf, size_t n) noexcept;
// A formatted print to fd 2 inside a driver call: formatted again here (up to 1 KiB) and copied.
void capture_format(const char* fmt, va_list ap) noexcept;
// One character written to fd 2 inside a driver call.
void capture_char(int c) noexcept;

}  // namespace cdsa
