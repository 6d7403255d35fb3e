#include "shim/common/log.h"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/io.h"
#include "shim/common/blocked_signal.h"

namespace cdsa {

void write_stderr(const char* data, unsigned long size) noexcept { base::write_all(2, data, size); }

bool write_stderr_bounded(const char* data, unsigned long size, int wait_ms) noexcept {
  int saved_errno = errno;
  // Closed, or closed and reused for something opened read-only (a pipe's read end): nothing to wait for.
  int fl = fcntl(2, F_GETFL);
  if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY) {
    errno = saved_errno;
    return false;
  }
  BlockedSignal pipe(SIGPIPE);
  bool raised_pipe = false;
  int waited_ms = 0;
  while (size > 0) {
    pollfd p{2, POLLOUT, 0};
    int ready = poll(&p, 1, wait_ms - waited_ms > 0 ? 10 : 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || (ready > 0 && (p.revents & POLLNVAL))) break;  // fd 2 closed
    if (ready == 0 || !(p.revents & (POLLOUT | POLLERR | POLLHUP))) {
      waited_ms += 10;
      if (waited_ms >= wait_ms) break;
      continue;
    }
    unsigned long piece = size < PIPE_BUF ? size : PIPE_BUF;  // a pipe with room for one piece takes it whole
    long n = syscall(SYS_write, 2, data, piece);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      waited_ms += 1;  // writable said poll, yet not for this piece: a short sleep in poll's next round
      if (waited_ms >= wait_ms) break;
      continue;
    }
    if (n <= 0) {
      raised_pipe = n < 0 && errno == EPIPE;
      break;
    }
    data += n;
    size -= static_cast<unsigned long>(n);
  }
  if (raised_pipe) pipe.take_back();
  errno = saved_errno;
  return size == 0;
}

void log_line(const char* fmt, ...) noexcept {
  char buf[1024];
  int len = snprintf(buf, sizeof buf, "cdsa: ");
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + len, sizeof buf - static_cast<size_t>(len) - 1, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  len += n;
  if (len > static_cast<int>(sizeof buf) - 2) len = static_cast<int>(sizeof buf) - 2;
  buf[len++] = '\n';
  write_stderr(buf, static_cast<unsigned long>(len));
}

}  // namespace cdsa
