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

// `marked`: the last launch whose mark was placed (the launches after it are the stream's tail, whose mark never was).
StreamView view(uint64_t id, uint64_t launched, uint64_t landed, uint64_t marked, uintptr_t ctx = 0) {
  StreamView v = fixtures::stream_view(-1, id, launched, landed);
  v.marked = marked;
  v.ctx = ctx;
  return v;
}

// The same, and a successful synchronizing call proved launches up to `synced` finished.
StreamView synced(StreamView v, uint64_t upto) {
  v.synced = upto;
  return v;
}

// The same, on a stream several threads put work on at the same time (shim/record/stream_order.h): a region that
// overlapped another exited when `raced_to` - 1 launches were recorded, or (`racing`) one is open now.
StreamView raced(StreamView v, uint64_t raced_to, bool racing = false) {
  v.raced_to = raced_to;
  v.racing = racing;
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
      // Pairs 1..3 (launches 1..6); pair 3's mark (6) was placed and never landed, pair 2's (4) landed: {5, 6}.
      // Mark 4 was placed behind the wait on its whole group, so it proves pair 2's primary (3) finished too.
      {"a faulting pair is one group of candidates", pdl_pairs(3), view(7, 6, 4, 6), nullptr, Verdict::Ambiguous,
       {5, 6},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonFirstUnfinished | kReasonSharedMark));
         EXPECT_EQ(a.candidates[1].reasons, static_cast<uint32_t>(kReasonSharedMark));
         EXPECT_EQ(a.candidates[0].group, 2u);
         EXPECT_TRUE(a.candidates[0].pdl_group);
         EXPECT_TRUE(a.marks_shared);
         EXPECT_FALSE(a.no_unfinished_evidence);
       }},
      {"the assert text picks the secondary of the group", pdl_pairs(3), view(7, 6, 4, 6), "epilogue_secondary",
       Verdict::Exact, {6}, [](const AttributionResult& a) { EXPECT_TRUE(a.named_by_device_assert); }},
      // Both 3 and 5 run gemm_primary, but landed mark 4 proves 3: the primary 5 alone.
      {"a primary's assert names the faulting pair's primary", pdl_pairs(3), view(7, 6, 4, 6), "gemm_primary",
       Verdict::Exact, {5}, [](const AttributionResult& a) { EXPECT_TRUE(a.named_by_device_assert); }},
      // Pair 3's mark was never placed (deferred: the stream's tail): nothing shows it unfinished.
      {"a tail whose mark was never placed is not proof", pdl_pairs(3), view(7, 6, 4, 4), nullptr, Verdict::Ambiguous,
       {5, 6},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonMarkNotPlaced | kReasonSharedMark));
         EXPECT_TRUE(a.no_unfinished_evidence);
       }},
      // ... unless the assert text names the kernel of one of them: then that one, with no other left.
      {"a tail named by the assert is exact", pdl_pairs(3), view(7, 6, 4, 4), "epilogue_secondary", Verdict::Exact,
       {6}},
      // 5 pairs; pair 2's mark (4) never landed, pair 1's (2) did: the group is {3, 4}; later pairs are not candidates.
      {"a fault in the marked prefix is inside its group only", pdl_pairs(5), view(7, 10, 2, 8), nullptr,
       Verdict::Ambiguous, {3, 4}},
      // No PDL: each launch's mark placed at once; the last one's placed too, and it never landed.
      {"plain launches, the last one unfinished, are exact", plain(4), view(7, 4, 3, 4), nullptr, Verdict::Exact, {4},
       [](const AttributionResult& a) {
         EXPECT_FALSE(a.marks_shared);
         EXPECT_EQ(a.launches_seen, 4u);
         EXPECT_EQ(a.launches_own_mark, 4u);
       }},
      // The last one's mark never placed (deferred: its stream carried PDL launches): a candidate, not proof, even
      // as the only launch not proven finished (a launch around cdsa's wrappers may be the one).
      {"a plain tail whose mark was never placed is listed, not named", plain(4), view(7, 4, 3, 3), nullptr,
       Verdict::Ambiguous, {4},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.launches_own_mark, 3u);  // the tail's mark was not placed
         EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonMarkNotPlaced));
         EXPECT_TRUE(a.no_unfinished_evidence);
       }},
      {"plain launches, the fault in the middle: launch 2, exactly", plain(4), view(7, 4, 1, 3), nullptr,
       Verdict::Exact, {2}},
      // Launch 2's mark failed to enqueue (not PDL): 3 shares with 2; mark 3 landed proves 1..3, 4's never did.
      {"a lost mark proves the launches before the next one", plain(4, {3}), view(7, 4, 3, 4), nullptr,
       Verdict::Exact, {4}},
      {"a lost mark joins the next group", plain(4, {3}), view(7, 4, 1, 3), nullptr, Verdict::Ambiguous, {2, 3},
       [](const AttributionResult& a) { EXPECT_FALSE(a.candidates[0].pdl_group); }},
      // cuCtxSynchronize returned CUDA_SUCCESS after launch 4: the tail finished, whatever its mark says.
      {"a successful sync proves the tail finished", plain(4), synced(view(7, 4, 3, 3), 4), nullptr, Verdict::Unknown,
       {4, 3, 2},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonRecentUnproven));
         EXPECT_TRUE(a.no_unfinished_evidence);
       }},
      // ... and, inside a group, the launches before it: pair 3's primary (5) finished, its secondary (6) is left.
      {"a sync inside a group leaves its later members", pdl_pairs(3), synced(view(7, 6, 4, 6), 5), nullptr,
       Verdict::Exact, {6}},
      // Launch 1's mark landed; 2..4 were numbered while two threads launched on the stream at once: the launch that
      // reached the stream first may carry a later number than a mark placed after it (the CUPTI case of issue 26:
      // a PDL launch recorded after two launches of another thread it had preceded). Mark 3's place proves
      // nothing then: all of 2..4, none proven unfinished.
      {"a raced stream lists every launch after its last proof", plain(4), raced(view(7, 4, 1, 4), 4), nullptr,
       Verdict::Ambiguous, {2, 3, 4},
       [](const AttributionResult& a) {
         EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonStreamRaced));
         EXPECT_EQ(a.candidates[0].group, 3u);
         EXPECT_TRUE(a.no_unfinished_evidence);
       }},
      // Without the race launch 4 is exact (plain launches, the last one unfinished); a region open now counts too.
      {"a race open now keeps the last launch from being named", plain(4), raced(view(7, 4, 3, 4), 0, true), nullptr,
       Verdict::Ambiguous, {4},
       [](const AttributionResult& a) { EXPECT_TRUE(a.no_unfinished_evidence); }},
      // The race ended below the last proof (raced_to 3: launches 1..2 and what came with them; mark 3 landed).
      {"a race the marks have passed changes nothing", plain(4), raced(view(7, 4, 3, 4), 3), nullptr, Verdict::Exact,
       {4}},
      // A landed mark still proves every launch numbered below it, and the assert text still names one.
      {"the assert text names one launch of a raced stream", pdl_pairs(3), raced(view(7, 6, 4, 6), 7),
       "epilogue_secondary", Verdict::Exact, {6},
       [](const AttributionResult& a) { EXPECT_TRUE(a.named_by_device_assert); }},
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
  AttributionResult both = attribute(s);  // no context proven healthy: both
  EXPECT_EQ(both.verdict, Verdict::Ambiguous);
  EXPECT_EQ(both.candidates.size(), 2u);

  // Issue 26 item 5: the context proven to hold the error is not enough; another context is left out only when it
  // answered without the error (the surfacing call's context, or the current one, is no proof).
  s.fault_ctx = 0x200;
  EXPECT_EQ(attribute(s).candidates.size(), 2u);

  s.healthy_ctx = {0x100};
  AttributionResult one = attribute(s);
  EXPECT_EQ(one.verdict, Verdict::Exact);
  ASSERT_EQ(one.candidates.size(), 1u);
  EXPECT_EQ(one.candidates[0].stream_id, 9u);
  EXPECT_EQ(one.other_context_streams, 1u);
}

// A stream outside the stream table (4,096 streams) has its launches and work in no view: a verdict the views would
// make exact is not, since the culprit may be on that stream.
TEST(AttributionGroups, AFullStreamTableLeavesNoVerdictExact) {
  FaultSnapshot s = plain(4);
  s.streams = {view(7, 4, 3, 4)};  // launch 4's placed mark never landed: exact on its own
  ASSERT_EQ(attribute(s).verdict, Verdict::Exact);
  s.stream_table_full = true;
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].stream_seq, 4u);
}

// judge_contexts: a context is Faulted when the surfacing call named it or a probe answered the sticky error,
// Healthy only when a probe answered without it, Unknown otherwise; each is asked through its streams until one
// answers, and the surfacing call's context is not asked at all.
TEST(AttributionGroups, ContextsAreJudgedByWhatTheDriverAnswersForThem) {
  std::vector<StreamView> streams = {view(1, 1, 0, 1, 0xa), view(2, 1, 0, 1, 0xb), view(3, 1, 0, 1, 0xb),
                                     view(4, 1, 0, 1, 0xc), view(5, 1, 0, 1, 0xd), view(6, 1, 0, 1, 0)};
  std::vector<uint64_t> asked;
  auto ask = [&](const StreamView& v) {
    asked.push_back(v.id);
    switch (v.id) {
      case 2:
        return ContextAnswer::Unknown;  // a destroyed handle: the next stream of 0xb is asked
      case 3:
        return ContextAnswer::Healthy;
      case 4:
        return ContextAnswer::Faulted;
      default:
        return ContextAnswer::Unknown;
    }
  };
  ContextJudgement j = judge_contexts(streams, /*surfaced*/ 0xa, ask);
  EXPECT_EQ(j.healthy, (std::vector<uintptr_t>{0xb}));
  EXPECT_EQ(j.faulted, (std::vector<uintptr_t>{0xa, 0xc}));
  EXPECT_EQ(asked, (std::vector<uint64_t>{2, 3, 4, 5}));  // not 1 (named by the call), not 6 (no context known)

  // A surfacing call's context that owns no recorded stream is still the one proven faulted.
  j = judge_contexts({view(1, 1, 0, 1, 0xa)}, 0xe, [](const StreamView&) { return ContextAnswer::Healthy; });
  EXPECT_EQ(j.healthy, (std::vector<uintptr_t>{0xa}));
  EXPECT_EQ(j.faulted, (std::vector<uintptr_t>{0xe}));
}

// Issue 26 item 1: a plain nll with good targets (1, its mark folded into the chain's), 100 PDL fill launches and a
// PDL nll with bad ones (102), all sharing one mark. Every member is examined: two launches run nll, so neither is
// certain (the group used to be cut at 64 members, leaving launch 1 as the only nll: a wrong certainty).
TEST(AttributionGroups, ALongChainIsExaminedWhole) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  for (uint64_t i = 1; i <= 102; ++i) {
    LaunchRecord r;
    r.seq = r.stream_seq = i;
    r.stream_id = 7;
    r.kernel_name = i == 1 || i == 102 ? kPrimary : kSecondary;
    if (i > 1) r.flags = kFlagProgrammatic | kFlagSharesMark;
    s.ring.push_back(r);
  }
  s.kernel_names = {{kPrimary, "nll_loss_forward_reduce_cuda_kernel_2d"}, {kSecondary, "fill_f32"}};
  s.streams = {view(7, 102, 0, 102)};  // the chain's one mark was placed, and never landed
  AttributionResult all = attribute(s);
  EXPECT_EQ(all.verdict, Verdict::Ambiguous);
  EXPECT_EQ(all.candidates.size(), 102u);
  EXPECT_EQ(all.candidates[0].group, 102u);
  EXPECT_EQ(all.launches_own_mark, 1u);

  s.asserts = {names("nll_loss_forward_reduce_cuda_kernel_2d")};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  EXPECT_EQ(seqs(a), (std::vector<uint64_t>{1, 102}));
  EXPECT_EQ(a.left_out_by_device_assert, 100u);
  EXPECT_FALSE(a.named_by_device_assert);

  // No mark placed at all (the whole stream is its tail): all 102, none certain.
  s.asserts.clear();
  s.streams = {view(7, 102, 0, 0)};
  AttributionResult tail = attribute(s);
  EXPECT_EQ(tail.candidates.size(), 102u);
  EXPECT_EQ(tail.launches_own_mark, 0u);
  EXPECT_TRUE(tail.no_unfinished_evidence);
}

}  // namespace
}  // namespace cdsa

namespace cdsa {
namespace {

// A copy, memset or memory operation at position 1 (after launch 1) on a stream whose mark 3 landed: in order, it
// ran before that mark and did not fault. Out of order (raced), its position says nothing: a 700 may be its.
TEST(AttributionGroups, OnARacedStreamAnOpsPositionProvesNothing) {
  FaultSnapshot s = plain(4);
  s.fault.code = CUDA_ERROR_ILLEGAL_ADDRESS;
  StreamView v = view(7, 4, 3, 4);
  v.op_at[0] = 2;
  v.ops = 1;
  s.streams = {v};
  AttributionResult in_order = attribute(s);
  EXPECT_EQ(in_order.verdict, Verdict::Exact);
  EXPECT_EQ(in_order.stream_work_unproven, 0u);
  s.streams = {raced(v, 3)};  // the race ended at launch 2, below mark 3: in order again
  EXPECT_EQ(attribute(s).stream_work_unproven, 0u);
  s.streams = {raced(v, 0, true)};
  AttributionResult racing = attribute(s);
  EXPECT_EQ(racing.verdict, Verdict::Ambiguous);
  EXPECT_EQ(racing.stream_work_unproven, 1u);
  // A sync that proved the op finished still does.
  v.ops_synced = 1;
  s.streams = {raced(v, 0, true)};
  EXPECT_EQ(attribute(s).stream_work_unproven, 0u);
}

}  // namespace
}  // namespace cdsa
