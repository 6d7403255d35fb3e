// cdsa simulated CUDA driver (tests only): the seeded scheduler's numbers (kernel durations, memop delays), the fault
// log, and the other SIM_CUDA_* switches read once. The scheduler itself is the stream worker (sim_streams.cc).
// See README.md for the contract and sim_internal.h for the shared state.

#include <fcntl.h>

#include "base/io.h"
#include "sim_internal.h"

namespace sim {

namespace {

// One message per bad value, on stderr (the sim's only words of its own there), then the default.
void bad_value(const char* name, const char* value, const char* expected) {
  fprintf(stderr, "simulated CUDA driver: %s=%s is not %s; using the default\n", name, value, expected);
}

// One of two words: true for `on`, false for `off` (the default: unset and empty too; anything else with a message).
bool two_way_env(const char* name, const char* off, const char* on) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0' || strcmp(v, off) == 0) return false;
  if (strcmp(v, on) == 0) return true;
  char expected[96];
  snprintf(expected, sizeof expected, "%s or %s", off, on);
  bad_value(name, v, expected);
  return false;
}

// A decimal number in [lo, hi], else `fallback` (unset, empty: silently; anything else: with a message).
uint64_t number_env(const char* name, uint64_t lo, uint64_t hi, uint64_t fallback, bool* set = nullptr) {
  const char* v = getenv(name);
  if (set != nullptr) *set = false;
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || *v == '-' || n < lo || n > hi) {
    char expected[96];
    snprintf(expected, sizeof expected, "a number from %llu to %llu", static_cast<unsigned long long>(lo),
             static_cast<unsigned long long>(hi));
    bad_value(name, v, expected);
    return fallback;
  }
  if (set != nullptr) *set = true;
  return n;
}

struct Sched {
  bool on = false;
  uint64_t seed = 0;
  uint64_t max_us = 2000;
};

const Sched& sched() {
  static const Sched s = [] {
    Sched s;
    s.seed = number_env("SIM_CUDA_SCHED_SEED", 0, UINT64_MAX, 0, &s.on);
    s.max_us = number_env("SIM_CUDA_SCHED_MAX_US", 0, 10000000, 2000);
    return s;
  }();
  return s;
}

// splitmix64: a well-mixed 64-bit value of its input.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

bool sched_on() { return sched().on; }

int64_t sched_delay_us(uint64_t stream_id, uint64_t seq) {
  const Sched& s = sched();
  if (!s.on) return 0;
  uint64_t h = mix(mix(mix(s.seed) ^ stream_id) ^ seq);
  return static_cast<int64_t>(h % (s.max_us + 1));
}

void log_fault(unsigned long long ctx_id, uint64_t stream_id, const Item& it, CUresult code) {
  static const char* path = getenv("SIM_CUDA_FAULT_LOG");
  if (path == nullptr || *path == '\0') return;
  const char* what = it.kind == Item::Kernel    ? (it.name != nullptr ? it.name : it.k->name)
                     : it.kind == Item::Write32 ? "cuStreamWriteValue32"
                     : it.kind == Item::Write64 ? "cuStreamWriteValue64"
                                                : "-";
  const bool kernel = it.kind == Item::Kernel;
  char line[640];
  int n =
      snprintf(line, sizeof line, "%llu %llu %s grid %u %u %u %d\n", ctx_id, static_cast<unsigned long long>(stream_id),
               what, kernel ? it.grid[0] : 0, kernel ? it.grid[1] : 0, kernel ? it.grid[2] : 0, static_cast<int>(code));
  if (n <= 0) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  cdsa::base::write_all(fd, line, static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1);
  close(fd);
}

bool ctx_current_ok_after_fault() {
  static const bool ok = two_way_env("SIM_CUDA_CTX_CURRENT_AFTER_FAULT", "fail", "ok");
  return ok;
}

bool assert_block_last() {
  static const bool last = two_way_env("SIM_CUDA_ASSERT_BLOCK", "zero", "last");
  return last;
}

int device_count() {
  static const int n = static_cast<int>(number_env("SIM_CUDA_DEVICES", 1, kMaxDevices, 1));
  return n;
}

}  // namespace sim
