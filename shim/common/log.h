// Diagnostics written by cdsa itself, on the process's stderr.
//
// Contract: thread-safe; every message is one write(2) call so lines from
// several threads do not interleave; no allocation for messages shorter than
// 1 KiB. Never throws. `notice_once` prints a given key at most once per process.
#pragma once

#include <atomic>
#include <cstdarg>

namespace cdsa {

// printf-style; prefixes "cdsa: " and appends a newline.
void log_line(const char* fmt, ...) noexcept __attribute__((format(printf, 1, 2)));

// Writes the whole buffer to fd 2, retrying on EINTR / short writes.
void write_stderr(const char* data, unsigned long size) noexcept;

// The fault report's write to fd 2, for an fd 2 that may be hostile: closed, a full pipe nobody reads (the
// program's own blocking fd or one it made non-blocking), a pipe whose reader is gone. Writes in pieces of at
// most PIPE_BUF bytes, each after poll(2) said fd 2 can take it, and gives up once fd 2 was not writable for
// `wait_ms` in all; never changes fd 2's flags; a SIGPIPE it causes is taken back (blocked for the write, then
// consumed unless one was pending already), so the program's exit status stays its own. Bypasses cdsa's own
// write(2) hook (a raw system call). Async-signal-safe, no allocation: the signal handlers use it too.
// True when every byte was written.
bool write_stderr_bounded(const char* data, unsigned long size, int wait_ms) noexcept;

// Prints the message only the first time `flag` is seen unset.
#define CDSA_NOTICE_ONCE(...)                                              \
  do {                                                                     \
    static std::atomic<bool> cdsa_notice_flag_{false};                     \
    if (!cdsa_notice_flag_.exchange(true, std::memory_order_relaxed))      \
      ::cdsa::log_line(__VA_ARGS__);                                       \
  } while (0)

}  // namespace cdsa
