#include "shim/record/launch_clock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "base/io.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace cdsa {
namespace launch_clock_internal {
std::atomic<bool> g_tsc{false};
}  // namespace launch_clock_internal

namespace {

std::once_flag g_once;
uint64_t g_tsc0 = 0, g_ns0 = 0;  // the start-up pair (tsc mode), written before g_tsc is set

// The kernel's clocksource is the TSC: it found the counter invariant and in step across CPUs (else it would have
// marked it unstable and moved to another source).
bool kernel_keeps_time_by_tsc() {
  int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16] = {};
  const ssize_t n = base::read_full(fd, buf, sizeof buf - 1);
  close(fd);
  return n >= 3 && std::strncmp(buf, "tsc", 3) == 0 && (n == 3 || buf[3] == '\n');
}

bool invariant_tsc() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, a, b, c, d);
  return (d >> 8) & 1;  // CPUID.80000007H:EDX[8], invariant TSC
#else
  return false;
#endif
}

// One (tsc, CLOCK_MONOTONIC) pair, read back to back; the tightest of a few tries.
void read_pair(uint64_t* tsc, uint64_t* ns) {
#if defined(__x86_64__)
  uint64_t best = ~uint64_t{0};
  for (int i = 0; i < 4; ++i) {
    const uint64_t t0 = __rdtsc();
    const uint64_t n = launch_clock_internal::monotonic_ns();
    const uint64_t t1 = __rdtsc();
    if (t1 - t0 < best) {
      best = t1 - t0;
      *tsc = t0 + (t1 - t0) / 2;
      *ns = n;
    }
  }
#else
  *tsc = 0;
  *ns = launch_clock_internal::monotonic_ns();
#endif
}

}  // namespace

void launch_clock_init() noexcept {
  std::call_once(g_once, [] {
    if (!invariant_tsc() || !kernel_keeps_time_by_tsc()) return;
    read_pair(&g_tsc0, &g_ns0);
    launch_clock_internal::g_tsc.store(true, std::memory_order_release);
  });
}

LaunchClockReading launch_clock_reading() noexcept {
  LaunchClockReading r;
  r.tsc = launch_clock_internal::g_tsc.load(std::memory_order_acquire);
  if (!r.tsc) return r;
  r.tsc0 = g_tsc0;
  r.ns0 = g_ns0;
  read_pair(&r.tsc1, &r.ns1);
  return r;
}

uint64_t LaunchClockReading::ns(uint64_t stamp) const noexcept {
  if (!tsc) return stamp;
  if (tsc1 <= tsc0 || ns1 <= ns0) return ns0;  // no time has passed that the two clocks agree on
  // ns0 + (stamp - tsc0) * (ns1 - ns0) / (tsc1 - tsc0), in long double (stamps of days at GHz rates).
  const long double rate = static_cast<long double>(ns1 - ns0) / static_cast<long double>(tsc1 - tsc0);
  const long double t = static_cast<long double>(ns0) +
                        (static_cast<long double>(stamp) - static_cast<long double>(tsc0)) * rate;
  return t <= 0 ? 0 : static_cast<uint64_t>(t);
}

const char* launch_clock_name() noexcept {
  return launch_clock_internal::g_tsc.load(std::memory_order_acquire) ? "tsc" : "clock_gettime";
}

}  // namespace cdsa
