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

// Prints the message only the first time `flag` is seen unset.
#define CDSA_NOTICE_ONCE(...)                                              \
  do {                                                                     \
    static std::atomic<bool> cdsa_notice_flag_{false};                     \
    if (!cdsa_notice_flag_.exchange(true, std::memory_order_relaxed))      \
      ::cdsa::log_line(__VA_ARGS__);                                       \
  } while (0)

}  // namespace cdsa
