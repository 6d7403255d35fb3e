// The launch clock (shim/record/launch_clock.h): a stamp taken at a launch, read back later as CLOCK_MONOTONIC ns.
#include "shim/record/launch_clock.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

namespace cdsa {
namespace {

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

TEST(LaunchClock, AReadingInterpolatesBetweenItsPairs) {
  LaunchClockReading r;
  r.tsc = true;
  r.tsc0 = 1000;
  r.ns0 = 5000;
  r.tsc1 = 3000;
  r.ns1 = 6000;
  EXPECT_EQ(r.ns(1000), 5000u);
  EXPECT_EQ(r.ns(2000), 5500u);
  EXPECT_EQ(r.ns(3000), 6000u);
  EXPECT_EQ(r.ns(5000), 7000u);  // a stamp after the reading: extrapolated at the same rate
  EXPECT_EQ(r.ns(0), 4500u);
  r.tsc1 = r.tsc0;  // no time between the pairs: the start-up time, not a division by zero
  EXPECT_EQ(r.ns(2000), 5000u);
}

TEST(LaunchClock, WithoutTheCounterAStampIsAlreadyNanoseconds) {
  LaunchClockReading r;  // default: not the counter
  EXPECT_EQ(r.ns(123456789), 123456789u);
}

TEST(LaunchClock, AStampReadsBackAsTheMonotonicTimeItWasTakenAt) {
  launch_clock_init();
  const char* name = launch_clock_name();
  // The architecture's counter (base/arch.h: "tsc" on x86-64, "cntvct" on aarch64) or the fallback.
  EXPECT_TRUE(std::strcmp(name, arch::kCounterName) == 0 || std::strcmp(name, "clock_gettime") == 0) << name;
  const uint64_t before = mono_ns();
  const uint64_t stamp = launch_stamp();
  const uint64_t after = mono_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the reading is taken well after the stamp
  const LaunchClockReading r = launch_clock_reading();
  const uint64_t t = r.ns(stamp);
  // Within the two readings' own skew of when the stamp was taken (1 ms: room for a loaded, sanitized run).
  EXPECT_GE(t + 1000000, before) << name;
  EXPECT_LE(t, after + 1000000) << name;
  const uint64_t later = launch_stamp();
  EXPECT_GT(r.ns(later), t + 10000000) << name;  // 20 ms later reads about 20 ms later
}

}  // namespace
}  // namespace cdsa
