#include "shim/record/launch_clock.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "base/io.h"

#if defined(__x86_64__)
#include <cpuid.h>  // the invariant-TSC bit; the counter itself is read through base/arch.h
#endif

namespace cdsa {
namespace launch_clock_internal {
std::atomic<bool> g_tsc{false};
}  // namespace launch_clock_internal

namespace {

std::once_flag g_once;
uint64_t g_tsc0 = 0, g_ns0 = 0;  // the start-up pair (tsc mode), written before g_tsc is set

// The kernel's clocksource is the counter arch::read_counter() reads: on x86-64 "tsc", which the kernel keeps only
// while it finds the counter invariant and in step across CPUs (else it marks it unstable and moves to another
// source); on aarch64 "arch_sys_counter", the generic timer, one system-wide count by the architecture's definition.
bool kernel_keeps_time_by_tsc() {
  int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[32] = {};
  const ssize_t n = base::read_full(fd, buf, sizeof buf - 1);
  close(fd);
  const size_t k = std::strlen(arch::kCounterClocksource);
  return n >= static_cast<ssize_t>(k) && std::strncmp(buf, arch::kCounterClocksource, k) == 0 &&
         (n == static_cast<ssize_t>(k) || buf[k] == '\n');
}

bool invariant_tsc() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, a, b, c, d);
  return (d >> 8) & 1;  // CPUID.80000007H:EDX[8], invariant TSC
#else
  // aarch64: the generic timer counts at the constant rate CNTFRQ_EL0 names (Armv8 requires it: "system counter"),
  // independent of the cores' clocks; zero there means firmware left it unset, and it is not used.
  return arch::counter_frequency() != 0;
#endif
}

// One (counter, CLOCK_MONOTONIC) pair, read back to back; the tightest of a few tries.
void read_pair(uint64_t* tsc, uint64_t* ns) {
  uint64_t best = ~uint64_t{0};
  for (int i = 0; i < 4; ++i) {
    const uint64_t t0 = arch::read_counter();
    const uint64_t n = launch_clock_internal::monotonic_ns();
    const uint64_t t1 = arch::read_counter();
    if (t1 - t0 < best) {
      best = t1 - t0;
      *tsc = t0 + (t1 - t0) / 2;
      *ns = n;
    }
  }
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
  return launch_clock_internal::g_tsc.load(std::memory_order_acquire) ? arch::kCounterName : "clock_gettime";
}

}  // namespace cdsa
