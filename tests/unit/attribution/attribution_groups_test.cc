// attribute() when launches share completion marks (programmatic dependent launch, shim/record/breadcrumbs.h) and
// when several contexts have work: hand-made snapshots, as in attribution_test.cc.
#include <gtest/gtest.h>

#include <vector>

#include "shim/fault/attribution.h"

namespace cdsa {
namespace {

constexpr uint32_t kPrimary = 1, kSecondary = 2, kOther = 3;

// Stream 7 runs `n` PDL pairs: launches 2i-1 (primary, own record) and 2i (secondary: programmatic, sharing the
// primary's mark). The mark of a pair's secondary is enqueued before the next pair's primary.
FaultSnapshot pdl_pairs(int n) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  for (int i = 1; i <= 2 * n; ++i) {
    LaunchRecord r;
    r.seq = r.stream_seq = static_cast<uint64_t>(i);
    r.stream_id = 7;
    r.kernel_name = i % 2 ? kPrimary : kSecondary;
    if (i % 2 == 0) r.flags = kFlagProgrammatic | kFlagSharesMark;
    s.ring.push_back(r);
  }
  s.kernel_names = {{kPrimary, "gemm_primary"}, {kSecondary, "epilogue_secondary"}, {kOther, "other_kernel"}};
  return s;
}

StreamView view(uint64_t id, uint64_t launched, uint64_t landed, uint64_t marked, uintptr_t ctx = 0) {
  StreamView v;
  v.id = id;
  v.launched = launched;
  v.landed = landed;
  v.marks = true;
  v.marked = marked;
  v.ctx = ctx;
  return v;
}

DeviceAssert names(const char* function) {
  DeviceAssert a;
  a.function = function;
  a.message = std::string("x.cu:1: ") + function + ": block: [0,0,0], thread: [0,0,0] Assertion `0` failed.";
  return a;
}

std::vector<uint64_t> seqs(const AttributionResult& a) {
  std::vector<uint64_t> out;
  for (const auto& c : a.candidates) out.push_back(c.stream_seq);
  return out;
}

TEST(AttributionGroups, AFaultingPairIsOneGroupOfCandidates) {
  // Pairs 1..3 (launches 1..6); pair 3 never finished: the mark of pair 2 (4) landed, pair 3's is the tail.
  FaultSnapshot s = pdl_pairs(3);
  s.streams = {view(7, 6, 4, 4)};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  // The faulting group {5, 6}, and pair 2's primary (3): mark 4 landed after a PDL secondary, not proof of 3.
  EXPECT_EQ(seqs(a), (std::vector<uint64_t>{3, 5, 6}));
  EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonPdlUnproven));
  EXPECT_EQ(a.candidates[1].reasons, static_cast<uint32_t>(kReasonFirstUnfinished | kReasonSharedMark));
  EXPECT_EQ(a.candidates[2].reasons, static_cast<uint32_t>(kReasonSharedMark));
  EXPECT_EQ(a.candidates[1].group, 2u);
  EXPECT_TRUE(a.marks_shared);
}

TEST(AttributionGroups, TheAssertTextPicksTheSecondaryOfTheGroup) {
  FaultSnapshot s = pdl_pairs(3);
  s.streams = {view(7, 6, 4, 4)};
  s.asserts = {names("epilogue_secondary")};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  EXPECT_EQ(seqs(a), (std::vector<uint64_t>{6}));
  EXPECT_TRUE(a.named_by_device_assert);
}

TEST(AttributionGroups, APrimaryAssertKeepsTheUnprovenPrimaryBeforeIt) {
  FaultSnapshot s = pdl_pairs(3);
  s.streams = {view(7, 6, 4, 4)};
  s.asserts = {names("gemm_primary")};
  AttributionResult a = attribute(s);
  // Both 3 and 5 run gemm_primary; 6 (the secondary) is left out by the text.
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  EXPECT_EQ(seqs(a), (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(a.left_out_by_device_assert, 1u);
  EXPECT_FALSE(a.named_by_device_assert);
}

TEST(AttributionGroups, AMarkedPrefixFaultIsInsideItsGroupOnly) {
  // 5 pairs; pair 2's mark (4) never landed, pair 1's (2) did: the group is {3, 4}, later pairs are not candidates.
  FaultSnapshot s = pdl_pairs(5);
  s.streams = {view(7, 10, 2, 8)};
  AttributionResult a = attribute(s);
  EXPECT_EQ(seqs(a), (std::vector<uint64_t>{1, 3, 4}));  // 1: pair 1's primary, behind landed mark 2
  for (const auto& c : a.candidates) EXPECT_LE(c.stream_seq, 4u);
}

TEST(AttributionGroups, PlainLaunchesWithATailOfOneAreExact) {
  // No PDL: each launch's mark was enqueued before the next; the last one's is deferred (the tail).
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  for (uint64_t i = 1; i <= 4; ++i) {
    LaunchRecord r;
    r.seq = r.stream_seq = i;
    r.stream_id = 7;
    s.ring.push_back(r);
  }
  s.streams = {view(7, 4, 3, 3)};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  EXPECT_EQ(seqs(a), (std::vector<uint64_t>{4}));
  EXPECT_FALSE(a.marks_shared);
  EXPECT_EQ(a.launches_seen, 4u);
  EXPECT_EQ(a.launches_own_mark, 3u);  // the tail's mark was not placed yet

  s.streams = {view(7, 4, 1, 3)};  // the fault in the middle: launch 2, exactly
  a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  EXPECT_EQ(seqs(a), (std::vector<uint64_t>{2}));
}

TEST(AttributionGroups, ALostMarkJoinsTheNextGroupButProvesTheLaunchesBefore) {
  // Launch 2's mark failed to enqueue (not PDL): 3 shares with 2; mark 3 landed proves 1..3, 4 is the tail.
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  for (uint64_t i = 1; i <= 4; ++i) {
    LaunchRecord r;
    r.seq = r.stream_seq = i;
    r.stream_id = 7;
    if (i == 3) r.flags = kFlagSharesMark;
    s.ring.push_back(r);
  }
  s.streams = {view(7, 4, 3, 3)};
  EXPECT_EQ(seqs(attribute(s)), (std::vector<uint64_t>{4}));
  s.streams = {view(7, 4, 1, 3)};  // mark 1 landed, the mark of 3 did not: 2 and 3 share it
  EXPECT_EQ(seqs(attribute(s)), (std::vector<uint64_t>{2, 3}));
}

TEST(AttributionGroups, OnlyTheFaultingContextsStreamsAreCandidates) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  LaunchRecord a, b;
  a.seq = 1, a.stream_id = 7, a.stream_seq = 1, a.kernel_name = kOther;
  b.seq = 2, b.stream_id = 9, b.stream_seq = 1, b.kernel_name = kPrimary;
  s.ring = {a, b};
  s.kernel_names = {{kPrimary, "gemm_primary"}, {kOther, "other_kernel"}};
  s.streams = {view(7, 1, 0, 1, /*ctx*/ 0x100), view(9, 1, 0, 1, /*ctx*/ 0x200)};
  AttributionResult both = attribute(s);  // fault context unknown: both
  EXPECT_EQ(both.verdict, Verdict::Ambiguous);
  EXPECT_EQ(both.candidates.size(), 2u);

  s.fault_ctx = 0x200;
  AttributionResult one = attribute(s);
  EXPECT_EQ(one.verdict, Verdict::Exact);
  ASSERT_EQ(one.candidates.size(), 1u);
  EXPECT_EQ(one.candidates[0].stream_id, 9u);
  EXPECT_EQ(one.other_context_streams, 1u);
}

TEST(AttributionGroups, ALongChainIsListedByItsFirstLaunches) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  for (uint64_t i = 1; i <= 200; ++i) {
    LaunchRecord r;
    r.seq = r.stream_seq = i;
    r.stream_id = 7;
    if (i > 1) r.flags = kFlagProgrammatic | kFlagSharesMark;
    s.ring.push_back(r);
  }
  s.streams = {view(7, 200, 0, 0)};  // nothing enqueued: the whole stream is one tail
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.candidates.size(), 64u);
  EXPECT_EQ(a.candidates[0].group, 200u);
  EXPECT_EQ(a.launches_own_mark, 0u);
}

}  // namespace
}  // namespace cdsa
