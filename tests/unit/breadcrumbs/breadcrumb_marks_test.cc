// 32-bit breadcrumb marks (device attribute 122 is 0: no 64-bit stream memory operations): the slot's low word is
// widened against the stream's last enqueued number, and attribution on widened views still finds the one
// unfinished launch past 2^32 launches on a stream.
#include <gtest/gtest.h>

#include <cstdint>

#include "shim/fault/attribution.h"
#include "shim/record/breadcrumbs.h"

namespace cdsa {
namespace {

constexpr uint64_t k4G = 1ull << 32;

TEST(BreadcrumbMarks, LowWordBelowTheLastEnqueuedNumberWidensBelowIt) {
  EXPECT_EQ(widen_mark(5, 7), 5u);
  EXPECT_EQ(widen_mark(7, 7), 7u);
  EXPECT_EQ(widen_mark(0, 0), 0u);  // nothing landed, nothing launched
  EXPECT_EQ(widen_mark(0, 3), 0u);  // nothing landed yet
}

TEST(BreadcrumbMarks, WrapsAroundAt2To32) {
  // Launched 2^32 + 2; the mark of 2^32 - 1 landed (low word 0xffffffff), then of 2^32 (low word 0).
  EXPECT_EQ(widen_mark(0xffffffffu, k4G + 2), k4G - 1);
  EXPECT_EQ(widen_mark(0u, k4G + 2), k4G);
  EXPECT_EQ(widen_mark(2u, k4G + 2), k4G + 2);
  EXPECT_EQ(widen_mark(1u, 3 * k4G + 1), 3 * k4G + 1);
}

TEST(BreadcrumbMarks, MarkLandedBeforeItsNumberWasPublishedIsAheadNotWrapped) {
  // The stream ran the write before the launching thread stored breadcrumb_launched: the mark is one ahead.
  EXPECT_EQ(widen_mark(8, 7), 8u);
  EXPECT_EQ(widen_mark(0, k4G - 1), k4G);
}

TEST(BreadcrumbMarks, NeverBelowZero) { EXPECT_EQ(widen_mark(0xfffffffeu, 1), 0u); }

TEST(BreadcrumbMarks, AttributionPastTheWrapFindsTheUnfinishedLaunch) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  LaunchRecord a, b;
  a.seq = 1, a.stream_id = 7, a.stream_seq = k4G;
  b.seq = 2, b.stream_id = 7, b.stream_seq = k4G + 1;
  s.ring = {a, b};
  StreamView v;
  v.slot = 0, v.id = 7, v.launched = k4G + 1, v.marks = true;
  v.landed = widen_mark(static_cast<uint32_t>(k4G), v.launched);  // launch 2^32 finished: low word 0
  s.streams = {v};
  AttributionResult r = attribute(s);
  EXPECT_EQ(r.verdict, Verdict::Exact);
  ASSERT_EQ(r.candidates.size(), 1u);
  EXPECT_EQ(r.candidates[0].ring_index, 1);
}

}  // namespace
}  // namespace cdsa
