// attribute() on hand-made fault snapshots: each test writes the ring, the streams' breadcrumb views, the device's
// assert lines and the graph nodes a fault would leave, and checks which launches are named and why.
#include "shim/fault/attribution.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "base/identifier.h"
#include "tests/unit/fixtures/snapshot_fixtures.h"

namespace cdsa {
namespace {

using fixtures::device_assert;
using fixtures::stream_view;

// A launch record; `name` is a StringTable id the snapshot's kernel_names may map.
LaunchRecord launch(uint64_t seq, uint64_t stream, uint64_t stream_seq, uint32_t name = kNoString) {
  return fixtures::launch_record(seq, stream, stream_seq, name);
}

// Two streams: 7 (launches 1, 3, 5 of the process) and 9 (launches 2, 4).
FaultSnapshot two_streams() {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  s.ring = {launch(1, 7, 1, 10), launch(2, 9, 1, 11), launch(3, 7, 2, 10), launch(4, 9, 2, 12), launch(5, 7, 3, 10)};
  s.kernel_names = {{10, "void gemm_kernel<float>(float*)"},
                    {11, "elementwise_add"},
                    {12, "void nll_loss_forward_kernel<float>(float*, long*)"}};
  return s;
}

TEST(Attribution, OneStreamWithUnfinishedWorkIsExact) {
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 1), stream_view(1, 9, 2, 2)};  // stream 7: launch 2 and 3 unfinished
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  ASSERT_EQ(a.candidates.size(), 1u);
  const AttributedLaunch& c = a.candidates[0];
  EXPECT_EQ(c.ring_index, 2);  // process launch 3 = stream 7's launch 2
  EXPECT_EQ(c.stream_id, 7u);
  EXPECT_EQ(c.stream_seq, 2u);
  EXPECT_EQ(c.pending, 2u);
  EXPECT_EQ(c.reasons, static_cast<uint32_t>(kReasonFirstUnfinished));
  EXPECT_TRUE(c.graph_nodes.empty());
  EXPECT_FALSE(a.unmarked_streams_pending);
  EXPECT_FALSE(a.named_by_device_assert);
  EXPECT_FALSE(a.launches_in_flight);
}

TEST(Attribution, SeveralStreamsWithUnfinishedWorkAreAmbiguousOldestFirst) {
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 0)};  // 7: its launch 3 (seq 5); 9: its launch 1 (seq 2)
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  ASSERT_EQ(a.candidates.size(), 2u);
  EXPECT_EQ(a.candidates[0].ring_index, 1);  // seq 2 was launched before seq 5
  EXPECT_EQ(a.candidates[0].pending, 2u);
  EXPECT_EQ(a.candidates[1].ring_index, 4);
  EXPECT_EQ(a.candidates[1].pending, 1u);
  for (const auto& c : a.candidates) EXPECT_EQ(c.reasons, static_cast<uint32_t>(kReasonFirstUnfinished));
}

TEST(Attribution, DeviceAssertTextPicksTheOneMatchingKernel) {
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 1)};  // 7: gemm (seq 5); 9: nll_loss (seq 4)
  s.asserts = {device_assert("nll_loss_forward_kernel")};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  EXPECT_TRUE(a.named_by_device_assert);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].ring_index, 3);
  EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonFirstUnfinished | kReasonMatchesDeviceAssert));

  // A launch went through an entry point cdsa could only pass through (unrecorded): "only this kernel matches" is
  // no longer a fact, and the one left is listed without it (oracle regression wrong-certainty-608524b675).
  s.passthrough_calls.push_back({"cuLaunchKernel", 13990, true});
  AttributionResult unseen = attribute(s);
  EXPECT_EQ(unseen.verdict, Verdict::Ambiguous);
  EXPECT_FALSE(unseen.named_by_device_assert);
  ASSERT_EQ(unseen.candidates.size(), 1u);
  EXPECT_EQ(unseen.candidates[0].reasons & kReasonMatchesDeviceAssert, 0u);
}

// The block the device's assert line names exists only in grids that have it: two pending launches of the
// asserting kernel, and the line's block 5 lies in one grid of 8 blocks, not in the other's 2.
TEST(Attribution, TheAssertsBlockRulesOutAGridWithoutIt) {
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 1)};  // pending: ring 4 (stream 7), ring 3 (stream 9)
  s.kernel_names[10] = s.kernel_names[12];                         // both run nll_loss_forward_kernel
  s.ring[4].grid[0] = 2;
  s.ring[3].grid[0] = 8;
  DeviceAssert a = device_assert("nll_loss_forward_kernel");
  a.has_position = true;
  a.block[0] = 5;
  s.asserts = {a};
  AttributionResult r = attribute(s);
  EXPECT_EQ(r.verdict, Verdict::Exact);
  EXPECT_TRUE(r.named_by_device_assert);
  ASSERT_EQ(r.candidates.size(), 1u);
  EXPECT_EQ(r.candidates[0].ring_index, 3);

  s.asserts[0].block[0] = 1;  // a block both grids have: the two stay
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);
  EXPECT_EQ(attribute(s).candidates.size(), 2u);

  s.asserts[0].block[0] = 9;  // a block neither has: never exact, both listed
  AttributionResult none = attribute(s);
  EXPECT_EQ(none.verdict, Verdict::Ambiguous);
  EXPECT_EQ(none.candidates.size(), 2u);

  s.asserts[0].block[0] = 5;  // a line without a position says nothing of the grid
  s.asserts[0].has_position = false;
  EXPECT_EQ(attribute(s).candidates.size(), 2u);
}

TEST(Attribution, DeviceAssertMatchingNoneOrSeveralKernelsLeavesItAmbiguous) {
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 1)};
  s.asserts = {device_assert("softmax_kernel")};  // matches neither
  AttributionResult none = attribute(s);
  EXPECT_EQ(none.verdict, Verdict::Ambiguous);
  EXPECT_EQ(none.candidates.size(), 2u);
  EXPECT_FALSE(none.named_by_device_assert);

  s.asserts = {device_assert("kernel")};  // a part of both names, the whole of neither
  AttributionResult part = attribute(s);
  EXPECT_EQ(part.verdict, Verdict::Ambiguous);
  EXPECT_EQ(part.candidates.size(), 2u);
  EXPECT_FALSE(part.named_by_device_assert);

  s.kernel_names[10] = s.kernel_names[12];  // both pending launches run nll_loss_forward_kernel
  s.asserts = {device_assert("nll_loss_forward_kernel")};
  AttributionResult both = attribute(s);
  EXPECT_EQ(both.verdict, Verdict::Ambiguous);
  EXPECT_EQ(both.candidates.size(), 2u);
  EXPECT_FALSE(both.named_by_device_assert);
}

TEST(Attribution, KernelMatchesTheWholeIdentifierOnly) {
  struct Case {
    const char* kernel;
    const char* function;
    bool matches;
  };
  for (const Case& c : std::initializer_list<Case>{
           // Mangled: compared demangled.
           {"_Z6kernelPi", "kernel", true},
           {"_ZN2at6native38nll_loss_forward_reduce_cuda_kernel_2dIflEEvPT_S3_PKS2_PKT0_S5_bllll",
            "nll_loss_forward_reduce_cuda_kernel_2d", true},
           {"_ZN2at6native12_GLOBAL__N_112index_kernelIfLi4EEEvPT_l",
            "void at::native::(anonymous namespace)::index_kernel<float, 4>(float*, long)", true},
           {"_Z13kernel_helperPi", "kernel", false},
           {"_Z16kernel_helperXYZPi", "kernel", false},
           {"_Z3fooI6kernelEvPi", "kernel", false},  // foo<kernel>: a type argument
           {"_Z6kernelPi", "kern", false},
           // Plain and demangled names: the identifier standing whole.
           {"elementwise_add", "elementwise_add", true},
           {"void gemm_kernel<float>(float*)", "gemm_kernel", true},
           {"void gemm_kernel<float>(float*)", "kernel", false},
           {"elementwise_add2", "elementwise_add", false},
           {"elementwise_add", "", false},
           {"", "elementwise_add", false},
           // Qualified where the assert qualifies (issue 26): the assert's scopes must be the kernel's, in order.
           {"_ZN1a3fooEPi", "b::foo", false},
           {"_ZN1a3fooEPi", "void b::foo(int*)", false},
           {"_ZN1a3fooEPi", "foo", true},
           {"_ZN1a3fooEPi", "a::foo", true},
           {"_ZN1a3fooEPi", "void a::foo(int*)", true},
           {"_ZN1x1a3fooEPi", "a::foo", true},  // lenient: no compiler prints x::a::foo so, but "yes" only keeps it
           {"_ZN2at6native12_GLOBAL__N_112index_kernelIfLi4EEEvPT_l",
            "void at::native::<unnamed>::index_kernel<float, 4>(float*, long)", true},  // EDG's anonymous namespace
           {"_ZN2at6native12_GLOBAL__N_112index_kernelIfLi4EEEvPT_l",
            "void at::cuda::index_kernel<float, 4>(float*, long)", false},
       })
    EXPECT_EQ(base::kernel_matches_assert_function(c.kernel, c.function), c.matches) << c.kernel << " / " << c.function;
}

// Issue 26 item 3: a copy or memory operation submitted after a stream's last launch proven finished may be what
// faulted (a memop on a freed block): the first unfinished launch after it is no longer certain. Work after a placed
// mark that never landed never ran; a device-side assert is a kernel's, whatever work there is.
TEST(Attribution, WorkThatIsNoLaunchMayBeWhatFaulted) {
  FaultSnapshot s = two_streams();
  s.fault.code = 700;
  s.streams = {stream_view(0, 7, 3, 1), stream_view(1, 9, 2, 2)};  // stream 7: launch 1 landed, 2 and 3 did not
  ASSERT_EQ(attribute(s).verdict, Verdict::Exact);
  s.streams[0].op_at[0] = 1 + 1;  // a memop after launch 1, before launch 2
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  EXPECT_EQ(a.stream_work_unproven, 1u);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].stream_seq, 2u);  // still listed

  s.streams[0].op_at[0] = 2 + 1;  // after launch 2, whose placed mark never landed: it never ran
  EXPECT_EQ(attribute(s).verdict, Verdict::Exact);
  s.streams[0].op_at[0] = 0 + 1;  // before any launch on it: it ran before launch 1 finished
  EXPECT_EQ(attribute(s).verdict, Verdict::Exact);
  s.streams[1].op_at[3] = 2 + 1;  // after stream 9's last launch, proven finished: it may have faulted
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);
  s.streams[1].op_at[3] = 0;
  s.streams[1].ops_forgotten = 2 + 1;  // one of the older ones may sit there
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);
  s.streams[1].ops_forgotten = 1 + 1;  // every older one sat at or before launch 1
  EXPECT_EQ(attribute(s).verdict, Verdict::Exact);

  // Stream 7's tail has no mark placed after launch 1 (marked 1): work after launch 2 may have run and faulted.
  s.streams[0].marked = 1;
  s.streams[0].op_at[0] = 2 + 1;
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);

  s.fault.code = 710;  // an assert: a kernel's
  s.streams[0] = stream_view(0, 7, 3, 1);
  s.streams[0].op_at[0] = 1 + 1;
  EXPECT_EQ(attribute(s).verdict, Verdict::Exact);

  // CUPTI alone: no such work is seen at all, so only an assert can be pinned on a launch.
  s.streams[0].op_at[0] = 0;
  s.stream_work_unseen = true;
  EXPECT_EQ(attribute(s).verdict, Verdict::Exact);
  s.fault.code = 700;
  AttributionResult unseen = attribute(s);
  EXPECT_EQ(unseen.verdict, Verdict::Ambiguous);
  EXPECT_TRUE(unseen.stream_work_unseen);
  EXPECT_EQ(unseen.candidates.size(), 1u);
}

// A successful synchronizing call proves the work that is no launch submitted before it (StreamView::ops_synced),
// and so does the driver torn down with the device's assert printed (a kernel's fault: no copy prints one).
TEST(Attribution, WorkThatIsNoLaunchIsProvenByASyncOrRuledOutByAnAssert) {
  FaultSnapshot s = two_streams();
  s.fault.code = 700;
  s.streams = {stream_view(0, 7, 3, 1), stream_view(1, 9, 2, 2)};
  StreamView& nine = s.streams[1];
  nine.op_at[1] = 2 + 1;  // op 1 (of 2), after stream 9's last launch, proven finished: it may have faulted
  nine.op_at[0] = 1 + 1;  // op 0, before it
  nine.ops = 2;
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);
  nine.ops_synced = 1;  // the sync proved op 0 only
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);
  nine.ops_synced = 2;
  EXPECT_EQ(attribute(s).verdict, Verdict::Exact);
  // Six ops, slots holding ops 4, 5, 2, 3; older ones forgotten. A sync of the first five leaves op 5 (slot 1).
  nine.ops = 6;
  nine.op_at[0] = nine.op_at[1] = nine.op_at[2] = nine.op_at[3] = nine.ops_forgotten = 2 + 1;
  nine.ops_synced = 5;
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);
  nine.op_at[1] = 1 + 1;  // op 5 before the last launch: proven by its landed mark
  EXPECT_EQ(attribute(s).verdict, Verdict::Exact);
  nine.ops_synced = 1;  // the forgotten ones (ops 0, 1) not all proven
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);

  s.fault.code = CUDA_ERROR_CONTEXT_IS_DESTROYED;  // torn down before anyone asked: the assert text decides
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);
  s.asserts = {fixtures::device_assert("kernel_a", "x.cu", 1)};
  EXPECT_EQ(attribute(s).stream_work_unproven, 0u);
}

// Issue 26 item 8: the assert's qualification counts. Two streams pending, a::foo and b::foo: the assert in b::foo
// names the second (by bare identifier both matched, so it stayed ambiguous); with a::foo alone pending, b::foo's
// assert rules it out, and nothing is named.
TEST(Attribution, TheAssertsQualificationTellsNamespacesApart) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  s.ring = {launch(1, 7, 1, 10), launch(2, 9, 1, 11)};
  s.kernel_names = {{10, "_ZN1a3fooEPi"}, {11, "_ZN1b3fooEPi"}};
  s.streams = {stream_view(0, 7, 1, 0), stream_view(1, 9, 1, 0)};
  s.asserts = {device_assert("void b::foo(int*)")};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].stream_id, 9u);

  s.streams = {stream_view(0, 7, 1, 0), stream_view(1, 9, 1, 1)};  // only a::foo unfinished
  AttributionResult none = attribute(s);
  EXPECT_NE(none.verdict, Verdict::Exact);
  EXPECT_TRUE(none.assert_matches_no_candidate);
  ASSERT_EQ(none.candidates.size(), 1u);
  EXPECT_EQ(none.candidates[0].stream_id, 7u);
}

// Issue 26 item 7: the assert text exists and names a function no candidate is. One stream pending: it used to be
// exact; the assert may be in a __device__ function the kernel calls, or in a launch cdsa did not record.
TEST(Attribution, AnAssertNoCandidateMatchesIsNeverExact) {
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 2)};  // stream 7's launch 3 (gemm_kernel) alone unfinished
  ASSERT_EQ(attribute(s).verdict, Verdict::Exact);
  s.asserts = {device_assert("softmax_kernel")};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  EXPECT_TRUE(a.assert_matches_no_candidate);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].ring_index, 4);

  // A function that cannot be a __global__ one says nothing, and costs nothing: operator() of a device lambda
  // (PyTorch's index kernels assert there), a lambda, a class template's member, a non-void return type.
  for (const char* f :
       {"operator()", "void Reducer<float>::apply(float*)", "int check_bounds(int, int)", "void S::f(int) const",
        "void at::native::index_put_kernel_impl<OpaqueType<1>>(TensorIterator&)::<lambda(char*)>::operator()(char*) "
        "const"}) {
    SCOPED_TRACE(f);
    s.asserts = {device_assert(f)};
    AttributionResult b = attribute(s);
    EXPECT_EQ(b.verdict, Verdict::Exact);
    EXPECT_FALSE(b.assert_matches_no_candidate);
    EXPECT_TRUE(b.assert_names_no_kernel);
  }
  // With several streams pending it tells none apart either: both stay.
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 1)};
  s.asserts = {device_assert("operator()")};
  AttributionResult c = attribute(s);
  EXPECT_EQ(c.verdict, Verdict::Ambiguous);
  EXPECT_EQ(c.candidates.size(), 2u);
}

// A candidate whose kernel is not known (its record left the ring) cannot be ruled out by the assert text.
TEST(Attribution, AnUnknownKernelIsNotRuledOutByTheAssert) {
  FaultSnapshot s = two_streams();
  s.ring.erase(s.ring.begin());                          // launch 1 (stream 7's first) is gone
  s.streams = {stream_view(0, 7, 3, 0), stream_view(1, 9, 2, 1)};  // 7: its launch 1 (lost); 9: its launch 2 (nll_loss)
  s.asserts = {device_assert("gemm_kernel")};            // not nll_loss: stream 9 is ruled out, the lost one is not
  AttributionResult a = attribute(s);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].stream_id, 7u);
  EXPECT_TRUE(a.candidates[0].reasons & kReasonAssertCannotRuleOut);
  EXPECT_FALSE(a.named_by_device_assert);
  EXPECT_EQ(a.verdict, Verdict::Exact);  // the only launch left whose mark was placed and never landed

  // The assert names stream 9's kernel: the lost record may run it too, so neither is certain (it used to be left
  // out, as matching nothing, and stream 9 named).
  s.asserts = {device_assert("nll_loss_forward_kernel")};
  AttributionResult b = attribute(s);
  EXPECT_EQ(b.verdict, Verdict::Ambiguous);
  EXPECT_EQ(b.candidates.size(), 2u);
}

// Issue 26 item 8 of its list (the attribution half): a replay has no kernel name of its own. Stream 7 replays a
// graph whose one kernel node is nll (its mark placed, never landed); stream 9's plain nll finished, but its mark was
// never placed. Both can be what the assert names: neither is certain (the replay used to be dropped, and 9 named).
TEST(Attribution, AReplayMatchesTheAssertThroughItsKernelNodes) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  LaunchRecord node = launch(1, 7, 0, 12);
  node.flags = kFlagCaptured;
  node.graph_id = 4;
  LaunchRecord replay = launch(2, 7, 1);
  replay.kind = LaunchKind::Graph;
  replay.graph_id = 4;
  s.ring = {node, replay, launch(3, 9, 1, 12)};
  s.graph_nodes = {node};
  s.kernel_names = {{12, "void nll_loss_forward_kernel<float>(float*, long*)"}, {13, "fill_f32"}};
  StreamView a = stream_view(0, 7, 1, 0), b = stream_view(1, 9, 1, 0);
  b.marked = 0;  // its mark still deferred
  s.streams = {a, b};
  s.asserts = {device_assert("nll_loss_forward_kernel")};
  AttributionResult r = attribute(s);
  EXPECT_EQ(r.verdict, Verdict::Ambiguous);
  ASSERT_EQ(r.candidates.size(), 2u);
  EXPECT_EQ(r.candidates[0].ring_index, 1);  // the replay (placed, missed) first
  EXPECT_EQ(r.candidates[1].ring_index, 2);

  // The replay's only node is another kernel: it is ruled out, and the assert names stream 9's launch.
  s.graph_nodes[0].kernel_name = 13;
  r = attribute(s);
  EXPECT_EQ(r.verdict, Verdict::Exact);
  ASSERT_EQ(r.candidates.size(), 1u);
  EXPECT_EQ(r.candidates[0].ring_index, 2);

  // A replay whose node table is not known whole (an exec cdsa holds no table for) cannot be ruled out.
  s.ring[1].graph_id = 0;
  r = attribute(s);
  EXPECT_EQ(r.verdict, Verdict::Ambiguous);
  ASSERT_EQ(r.candidates.size(), 2u);
  EXPECT_TRUE(r.candidates[0].reasons & kReasonAssertCannotRuleOut);
}

TEST(Attribution, OverwrittenRecordIsNamedByStreamAndNumber) {
  FaultSnapshot s = two_streams();
  s.ring.erase(s.ring.begin(), s.ring.begin() + 3);      // the ring kept launches 4 and 5 only
  s.streams = {stream_view(0, 7, 3, 1), stream_view(1, 9, 2, 2)};  // stream 7's launch 2 (seq 3) failed: gone
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].ring_index, -1);
  EXPECT_EQ(a.candidates[0].stream_id, 7u);
  EXPECT_EQ(a.candidates[0].stream_seq, 2u);
  EXPECT_EQ(a.candidates[0].pending, 2u);
  EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonFirstUnfinished | kReasonRecordOverwritten));
}

TEST(Attribution, OverwrittenRecordRanksAfterRecordsStillInTheRing) {
  FaultSnapshot s = two_streams();
  s.ring.erase(s.ring.begin());                          // launch 1 (stream 7's first) is gone
  s.streams = {stream_view(0, 7, 3, 0), stream_view(1, 9, 2, 1)};  // 7: its launch 1; 9: its launch 2 (seq 4)
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  ASSERT_EQ(a.candidates.size(), 2u);
  EXPECT_EQ(a.candidates[0].stream_id, 9u);
  EXPECT_EQ(a.candidates[0].ring_index, 2);
  EXPECT_EQ(a.candidates[1].stream_id, 7u);
  EXPECT_EQ(a.candidates[1].ring_index, -1);
}

TEST(Attribution, StreamWithoutMarksCannotBeRuledOut) {
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 0, /*marks=*/false)};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);  // one marked candidate, but stream 9 may hold the failing launch
  EXPECT_TRUE(a.unmarked_streams_pending);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].ring_index, 4);
}

TEST(Attribution, OnlyStreamsWithoutMarksGiveRecentLaunchesUnproven) {
  FaultSnapshot s = two_streams();
  s.breadcrumbs_active = false;
  s.streams = {stream_view(0, 7, 3, 0, false), stream_view(1, 9, 2, 0, false)};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Unknown);
  EXPECT_TRUE(a.unmarked_streams_pending);
  ASSERT_EQ(a.candidates.size(), 3u);  // the three most recent, newest first
  EXPECT_EQ(a.candidates[0].ring_index, 4);
  EXPECT_EQ(a.candidates[1].ring_index, 3);
  EXPECT_EQ(a.candidates[2].ring_index, 2);
  for (const auto& c : a.candidates) {
    EXPECT_EQ(c.reasons, static_cast<uint32_t>(kReasonRecentUnproven));
    EXPECT_EQ(c.pending, 0u);
  }
}

TEST(Attribution, GraphReplayNamesTheGraphLaunchAndListsItsCapturedNodes) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  // Capture 2 on stream 7 recorded two kernels (captured: no stream number, no mark), capture 3 one more.
  LaunchRecord n1 = launch(1, 7, 0, 10), n2 = launch(2, 7, 0, 11), other = launch(3, 8, 0, 12);
  for (LaunchRecord* n : {&n1, &n2, &other}) n->flags = kFlagCaptured;
  n1.graph_id = n2.graph_id = 2;
  other.graph_id = 3;
  LaunchRecord replay = launch(4, 7, 1);
  replay.kind = LaunchKind::Graph;
  replay.graph_id = 2;
  s.ring = {n1, n2, other, replay};
  s.graph_nodes = {other, n1, n2};
  s.streams = {stream_view(0, 7, 1, 0)};
  AttributionResult a = attribute(s);
  // The replay is certain, which of its two kernel nodes failed is not: nothing tells them apart.
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  EXPECT_TRUE(a.graph_nodes_ambiguous);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].ring_index, 3);
  EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonFirstUnfinished | kReasonGraphReplay));
  EXPECT_EQ(a.candidates[0].graph_nodes, (std::vector<size_t>{1, 2}));  // capture 2's nodes, in capture order
  EXPECT_EQ(a.candidates[0].graph_node_pick, -1);
  EXPECT_TRUE(a.candidates[0].graph_nodes_ambiguous);

  // The device's assert names the kernel of exactly one node: that node, and the verdict is exact again.
  s.kernel_names = {{10, "fill_f32"}, {11, "_Z21indexSelectSmallIndexPfPKlii"}, {12, "fill_f32"}};
  s.asserts = {device_assert("indexSelectSmallIndex")};
  a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].graph_node_pick, 1);  // the position in graph_nodes: n2
  EXPECT_FALSE(a.candidates[0].graph_nodes_ambiguous);
  EXPECT_TRUE(a.candidates[0].reasons & kReasonNodeMatchesDeviceAssert);

  // Both nodes run the named kernel: still ambiguous, never a guess.
  s.kernel_names[10] = s.kernel_names[11];
  a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  EXPECT_EQ(a.candidates[0].graph_node_pick, -1);

  // A table cdsa could not follow (device-updatable nodes): never exact, even with one node picked.
  s.kernel_names[10] = "fill_f32";
  s.graph_tables[2].device_changes = true;
  a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  EXPECT_EQ(a.candidates[0].graph_node_pick, 1);
}

TEST(Attribution, GraphReplayOfOneNodeIsExact) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  LaunchRecord node = launch(0, 0, 0, 10);
  node.graph_id = 5;
  LaunchRecord replay = launch(1, 7, 1);
  replay.kind = LaunchKind::Graph;
  replay.graph_id = 5;
  s.ring = {replay};
  s.graph_nodes = {node};
  s.streams = {stream_view(0, 7, 1, 0)};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  EXPECT_FALSE(a.candidates[0].graph_nodes_ambiguous);
}

TEST(Attribution, CapturedRecordIsNeverTheFailingLaunch) {
  FaultSnapshot s;
  s.breadcrumbs_active = true;
  LaunchRecord captured = launch(1, 7, 1, 10);  // same stream and number as the real launch 1, but captured
  captured.flags = kFlagCaptured;
  s.ring = {captured, launch(2, 7, 1, 11)};
  s.streams = {stream_view(0, 7, 1, 0)};
  AttributionResult a = attribute(s);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].ring_index, 1);
}

TEST(Attribution, UnfinishedAtExitNamesTheLastLaunchOfTheOneUnfinishedStream) {
  // What the exit probe sees: every stream drained but one, whose last launch never finished.
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 2)};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Exact);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].ring_index, 4);
  EXPECT_EQ(a.candidates[0].pending, 1u);
}

TEST(Attribution, NothingUnfinishedGivesRecentLaunchesUnproven) {
  FaultSnapshot s = two_streams();
  s.ring.resize(2);
  s.streams = {stream_view(0, 7, 1, 1), stream_view(1, 9, 1, 1)};
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Unknown);
  ASSERT_EQ(a.candidates.size(), 2u);  // fewer than three in the ring: all of them
  EXPECT_EQ(a.candidates[0].ring_index, 1);
  EXPECT_EQ(a.candidates[1].ring_index, 0);
  EXPECT_EQ(a.candidates[0].reasons, static_cast<uint32_t>(kReasonRecentUnproven));

  s.ring.clear();
  EXPECT_TRUE(attribute(s).candidates.empty());
}

TEST(Attribution, LaunchInFlightOnAnotherThreadKeepsTheVerdictFromBeingExact) {
  // Issue 7 fact 10: the failing launch faulted before its thread recorded it; stream 9 has one innocent pending
  // launch. While a launch is in flight the ring cannot prove the pending one failed.
  FaultSnapshot s = two_streams();
  s.streams = {stream_view(0, 7, 3, 3), stream_view(1, 9, 2, 1)};
  ASSERT_EQ(attribute(s).verdict, Verdict::Exact);
  s.launches_in_flight = 1;
  AttributionResult a = attribute(s);
  EXPECT_EQ(a.verdict, Verdict::Ambiguous);
  EXPECT_TRUE(a.launches_in_flight);
  ASSERT_EQ(a.candidates.size(), 1u);
  EXPECT_EQ(a.candidates[0].ring_index, 3);

  // Also when the pending record itself left the ring, and when the device's assert text picked a kernel.
  s.ring.erase(s.ring.begin() + 3);
  EXPECT_EQ(attribute(s).verdict, Verdict::Ambiguous);
  s = two_streams();
  s.streams = {stream_view(0, 7, 3, 2), stream_view(1, 9, 2, 1)};
  s.asserts = {device_assert("nll_loss_forward_kernel")};
  s.launches_in_flight = 2;
  AttributionResult picked = attribute(s);
  EXPECT_TRUE(picked.named_by_device_assert);
  EXPECT_EQ(picked.verdict, Verdict::Ambiguous);
}

}  // namespace
}  // namespace cdsa
