#include "shim/common/log.h"

#include <cerrno>
#include <cstdio>
#include <unistd.h>

#include "base/io.h"

namespace cdsa {

void write_stderr(const char* data, unsigned long size) noexcept { base::write_all(2, data, size); }

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
