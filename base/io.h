// EINTR-safe read/write loops (header-only: nothing to link; async-signal-safe, no allocation).
#pragma once

#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>

namespace cdsa::base {

// Writes all `size` bytes of `data` to `fd`, retrying on EINTR and short writes. False (errno set) on an error.
inline bool write_all(int fd, const void* data, size_t size) noexcept {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {  // nothing written and no error: do not spin
      errno = EIO;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads up to `size` bytes from `fd` (at `offset` when it is not negative, with pread), retrying on EINTR and short
// reads until `size` bytes or the end of the file. The bytes read (fewer than `size` at the end), or -1 (errno set).
inline ssize_t read_full(int fd, void* data, size_t size, off_t offset = -1) noexcept {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = offset < 0 ? ::read(fd, p + done, size - done)
                                 : ::pread(fd, p + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;  // end of file
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace cdsa::base
