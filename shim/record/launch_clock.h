// When a launch was made, at the price of a few instructions: the CPU's counter where the kernel itself keeps time
// by it (x86-64: an invariant TSC, "tsc" the current clocksource; aarch64: the generic timer's CNTVCT_EL0,
// "arch_sys_counter" the clocksource; base/arch.h reads either), else CLOCK_MONOTONIC. A launch keeps the
// raw stamp (LaunchRecord::stamp); a LaunchClockReading makes CLOCK_MONOTONIC nanoseconds of it when records are
// read (the fault snapshot takes one), interpolating between the pair of readings taken at start-up and one taken
// then, so a converted time is as close to CLOCK_MONOTONIC as those readings are to each other (tens of
// nanoseconds).
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>

#include "base/arch.h"

namespace cdsa {
namespace launch_clock_internal {
extern std::atomic<bool> g_tsc;  // the counter is used (x86-64's TSC or aarch64's CNTVCT_EL0); set once by launch_clock_init, before the first launch is recorded
inline uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace launch_clock_internal

// Chooses the clock and takes the start-up pair. Idempotent; before the first launch_stamp() (recorder_init).
void launch_clock_init() noexcept;

// The launch path's reading.
inline uint64_t launch_stamp() noexcept {
  if (launch_clock_internal::g_tsc.load(std::memory_order_relaxed)) return arch::read_counter();
  return launch_clock_internal::monotonic_ns();
}

// What converts stamps into CLOCK_MONOTONIC nanoseconds: the start-up pair and a pair read when it was made (one
// for a whole snapshot's records).
struct LaunchClockReading {
  bool tsc = false;
  uint64_t tsc0 = 0, ns0 = 0, tsc1 = 0, ns1 = 0;
  uint64_t ns(uint64_t stamp) const noexcept;
};
LaunchClockReading launch_clock_reading() noexcept;

// Which clock launch_stamp() reads: arch::kCounterName ("tsc" on x86-64, "cntvct" on aarch64) or "clock_gettime"
// (launch_clock_test).
const char* launch_clock_name() noexcept;

}  // namespace cdsa
