#include "cli/progress.h"

#include <unistd.h>
#include <cstdio>
#include <ctime>

namespace cdsa::cli {
namespace {
uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

Progress::Progress(const char* what, size_t total) : what_(what), total_(total), active_(isatty(2) == 1) {}

Progress::~Progress() { finish(); }

void Progress::step(size_t done) {
  if (!active_) return;
  uint64_t t = now_ns();
  if (drawn_ && t - last_ns_ < 100000000ull && done < total_) return;
  last_ns_ = t;
  drawn_ = true;
  fprintf(stderr, "\r\033[Kcdsa: %s %zu/%zu", what_, done, total_);
  fflush(stderr);
}

void Progress::finish() {
  if (active_ && drawn_) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
  }
  drawn_ = false;
  active_ = false;
}

}  // namespace cdsa::cli
