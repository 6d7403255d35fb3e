// attribute() when launches share completion marks (programmatic dependent launch, shim/record/breadcrumbs.h) and
// when several contexts have work: hand-made snapshots, as in attribution_test.cc.
#include <gtest/gtest.h>

#include <vector>

#include "shim/fault/attribution.h"
#include "tests/unit/fixtures/snapshot_fixtures.h"

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
  // Marks made without the PDL proof (pdl_unproven kAllUnproven): a group mark proves only its last.
  StreamView v = fixtures::stream_view(-1, id, launched, landed);
  v.marked = marked;
  v.ctx = ctx;
  return v;
}

// The same, the groups' marks enqueued behind an event wait on the whole group (shim/record/breadcrumbs.h), except
// those of groups ending at or before `unproven`.
StreamView proven(StreamView v, uint64_t unproven = 0) {
  v.pdl_unproven = unproven;
  return v;
}

DeviceAssert names(const char* function) { return fixtures::device_assert(function, "x.cu", 1); }

std::vector<uint64_t> seqs(const AttributionResult& a) {
  std::vector<uint64_t> out;
  for (const auto& c : a.candidates) out.push_back(c.stream_seq);
  return out;
}

// Stream 7 runs `n` plain launches, each with its own mark, but for those in `shares` (their mark joined the next
// one's: it failed to enqueue).
FaultSnapshot plain(uint64_t n, std::vector<uint64_t> shares = {}) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  for (uint64_t i = 1; i <= n; ++i) {
    LaunchRecord r;
    r.seq = r.stream_seq = i;
    r.stream_id = 7;
    for (uint64_t x : shares)
      if (x == i) r.flags = kFlagSharesMark;
    s.ring.push_back(r);
  }
  return s;
}

// One stream's launches, its marks (launched, landed, marked), the device's assert text, and what attribute() says.
struct GroupCase {
  const char* what;
  FaultSnapshot snapshot;  // stream 7's launches
  StreamView stream;
  const char* assert_in;  // the function the device's assert names, or nullptr
  Verdict verdict;
  std::vector<uint64_t> candidates;  // their stream_seq, in order
  void (*more)(const AttributionResult&) = nullptr;
};

TEST(AttributionGroups, EachStreamShapeGivesItsVerdictAndCandidates) {
  const GroupCase cases[] = {
      // Pairs 1..3 (launches 1..6); pair 3 never finished: the mark of pair 2 (4) landed, pair 3's is the tail.
      // The faulting group {5, 6} first, then pair 2's primary (3): mark 4 landed after a PDL secondary, not proof
      // of 3, so 3 stays a candidate, listed after the ones the marks point at.
      {"a faulting pair is one group of candidates", pdl_pairs(3), view(7, 6, 4, 4), nullptr, Verdict::Ambiguous,
       {5, 6, 3},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonFirstUnfinished | kReasonSharedMark));
         EXPECT_EQ(a.candidates[1].reasons, static_cast<uint32_t>(kReasonSharedMark));
         EXPECT_EQ(a.candidates[2].reasons, static_cast<uint32_t>(kReasonPdlUnproven));
         EXPECT_EQ(a.candidates[0].group, 2u);
         EXPECT_EQ(a.pdl_unproven, 1u);
         EXPECT_TRUE(a.marks_shared);
       }},
      {"the assert text picks the secondary of the group", pdl_pairs(3), view(7, 6, 4, 4), "epilogue_secondary",
       Verdict::Exact, {6}, [](const AttributionResult& a) { EXPECT_TRUE(a.named_by_device_assert); }},
      // Both 3 and 5 run gemm_primary; 6 (the secondary) is left out by the text. 5, the first unfinished, first.
      {"a primary's assert keeps the unproven primary before it", pdl_pairs(3), view(7, 6, 4, 4), "gemm_primary",
       Verdict::Ambiguous, {5, 3},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.left_out_by_device_assert, 1u);
         EXPECT_EQ(a.pdl_unproven, 1u);
         EXPECT_FALSE(a.named_by_device_assert);
       }},
      // Pair 2's primary (3) runs another kernel: the text rules it out as it rules out the secondary 6.
      {"a primary's assert is exact when the unproven primary runs another kernel",
       [] {
         FaultSnapshot s = pdl_pairs(3);
         s.ring[2].kernel_name = kOther;
         return s;
       }(),
       view(7, 6, 4, 4), "gemm_primary", Verdict::Exact, {5},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.pdl_unproven, 0u);
         EXPECT_TRUE(a.named_by_device_assert);
       }},
      // The marks waited for their whole group: landed mark 4 proves pair 2's primary (3) finished too.
      {"a proven group mark rules out the primary before it", pdl_pairs(3), proven(view(7, 6, 4, 4)), "gemm_primary",
       Verdict::Exact, {5},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.pdl_unproven, 0u);
         EXPECT_TRUE(a.named_by_device_assert);  // of the group {5, 6}, only 5 is gemm_primary
       }},
      {"a proven faulting pair is its group alone", pdl_pairs(3), proven(view(7, 6, 4, 4)), nullptr,
       Verdict::Ambiguous, {5, 6}},
      // Pair 2's wait could not be placed (its mark 4 is the stream's last unproven one): 3 is a candidate again.
      {"a group mark enqueued without its wait proves nothing of the primary", pdl_pairs(3),
       proven(view(7, 6, 4, 4), /*unproven=*/4), "gemm_primary", Verdict::Ambiguous, {5, 3}},
      // Only pair 1's went without: mark 4, placed after it with its wait, proves pair 2 whole.
      {"a later proven mark is proof again", pdl_pairs(3), proven(view(7, 6, 4, 4), /*unproven=*/2), "gemm_primary",
       Verdict::Exact, {5}},
      // 5 pairs; pair 2's mark (4) never landed, pair 1's (2) did: the group is {3, 4}, then 1 (pair 1's primary,
      // behind landed mark 2, listed last); later pairs are not candidates.
      {"a fault in the marked prefix is inside its group only", pdl_pairs(5), view(7, 10, 2, 8), nullptr,
       Verdict::Ambiguous, {3, 4, 1}},
      // No PDL: each launch's mark was enqueued before the next; the last one's is deferred (the tail).
      {"plain launches with a tail of one are exact", plain(4), view(7, 4, 3, 3), nullptr, Verdict::Exact, {4},
       [](const AttributionResult& a) {
         EXPECT_FALSE(a.marks_shared);
         EXPECT_EQ(a.launches_seen, 4u);
         EXPECT_EQ(a.launches_own_mark, 3u);  // the tail's mark was not placed yet
       }},
      {"plain launches, the fault in the middle: launch 2, exactly", plain(4), view(7, 4, 1, 3), nullptr,
       Verdict::Exact, {2}},
      // Launch 2's mark failed to enqueue (not PDL): 3 shares with 2; mark 3 landed proves 1..3, 4 is the tail.
      {"a lost mark proves the launches before the next one", plain(4, {3}), view(7, 4, 3, 3), nullptr,
       Verdict::Exact, {4}},
      {"a lost mark joins the next group", plain(4, {3}), view(7, 4, 1, 3), nullptr, Verdict::Ambiguous, {2, 3}},
  };
  for (const GroupCase& c : cases) {
    SCOPED_TRACE(c.what);
    FaultSnapshot s = c.snapshot;
    s.streams = {c.stream};
    if (c.assert_in) s.asserts = {names(c.assert_in)};
    AttributionResult a = attribute(s);
    EXPECT_EQ(a.verdict, c.verdict);
    EXPECT_EQ(seqs(a), c.candidates);
    if (c.more && seqs(a) == c.candidates) c.more(a);
  }
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
