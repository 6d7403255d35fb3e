// Attribution: which launch failed. The decision cdsa exists for, as a pure
// function of a FaultSnapshot (shim/fault/fault_snapshot.h): no symbolizer, no
// wording, no global state. shim/fault/report_builder.h words the result.
//
// The rule (docs/attribution.md, which holds the proofs): a landed mark proves that every launch at or before it on
// its stream finished (shim/record/breadcrumbs.h places a mark after a PDL launch only behind an event wait on the
// whole group), and so does a successful synchronizing call (StreamView::synced). On each stream the launches after
// that are candidates, one group at a time: the group of the first placed mark that never landed (launches share a
// mark in a PDL chain, or when a mark could not be placed), every member, never a truncated list; or, when every
// placed mark landed, the stream's tail, whose mark was never placed and so proves nothing either way
// (kReasonMarkNotPlaced). Candidates are oldest first within each kind, placed-and-missed before not-placed.
// The device's assert text, when its function can be a __global__ one (base::may_be_kernel), keeps the candidates
// whose kernel (or one of whose replay's kernel nodes) is that function by qualified name, and those it cannot rule
// out (an unknown kernel, a replay whose nodes are not all known); when it rules out every candidate the verdict is
// never exact. Exact means one candidate is left and either its own placed mark never landed or the assert text
// names its kernel: a stream's tail whose mark was never placed, alone, is not proof (the fault may come from work
// cdsa did not record). Streams of a context proven free of the sticky error (FaultSnapshot::healthy_ctx,
// judge_contexts below) do not count.
// A stream without marks cannot be ruled out, so the verdict is then never
// exact; nor while another thread has a launch in flight (submitted, not yet
// recorded), since the failing launch may be that one; nor once the program called an entry point cdsa could only
// pass through (a version newer than its headers) that can submit work: that work is in no record. With nothing pending
// that the marks can see, the three most recent launches are shown, unproven.
//
// Contract: pure and deterministic; allocates the result; thread-safe. In sanitizer builds it checks (CDSA_DCHECK)
// the invariants of the views it is handed (landed <= marked <= launched, synced <= launched) and of the groups.
//
//   FaultSnapshot s;
//   s.ring = {a, b};                              // b: stream 7, stream_seq 5
//   s.streams = {{0, 7, 5, 4, true}};             // stream 7: 5 launched, 4 landed
//   AttributionResult r = attribute(s);
//   // r.verdict == Verdict::Exact, r.candidates[0].ring_index == 1,
//   // r.candidates[0].reasons == kReasonFirstUnfinished
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "shim/fault/fault_snapshot.h"

namespace cdsa {

enum class Verdict : uint8_t { Exact, Ambiguous, Unknown };

// Why a launch is a candidate (bits of AttributedLaunch::reasons).
enum AttributionReason : uint32_t {
  kReasonFirstUnfinished = 1u << 0,      // the first launch on its stream whose completion mark never landed
  kReasonMatchesDeviceAssert = 1u << 1,  // several streams were pending; only its kernel matches the assert text
  kReasonRecordOverwritten = 1u << 2,    // its record left the ring: known by stream and number only
  kReasonGraphReplay = 1u << 3,          // a graph launch: the failing kernel is one of its captured nodes
  kReasonRecentUnproven = 1u << 4,       // nothing pending that the marks can see: a recent launch, not proven
  kReasonNodeMatchesDeviceAssert = 1u << 5,  // a graph replay: of its kernel nodes, only this one matches the assert
  kReasonSharedMark = 1u << 6,           // one of several launches sharing the first completion mark that never landed
  // Its stream's tail: every mark placed on the stream landed, and none was placed after it (deferred for a PDL
  // launch that may follow, or its placement met the dead context), so nothing shows whether it finished.
  kReasonMarkNotPlaced = 1u << 7,
  kReasonAssertCannotRuleOut = 1u << 8,  // the assert text could not rule it out: its kernel is not known
  // After its stream's last proof (a landed mark, a sync), on a stream several threads put work on at the same time
  // (StreamView::raced): its order there, and which mark it precedes, are not known, so nothing shows it unfinished.
  kReasonStreamRaced = 1u << 9,
};

// (kLandedPdlMarkProvesPrimary, whether a plain memop after a PDL secondary proves its primary finished, is where
// the marks are placed: shim/record/breadcrumbs.h. Attribution needs no constant: no mark is placed that proves less.)

struct AttributedLaunch {
  int ring_index = -1;  // into FaultSnapshot::ring; -1 when the record was overwritten
  uint64_t stream_id = 0;
  uint64_t stream_seq = 0;
  uint64_t pending = 0;             // launches on its stream whose mark never landed (0 for a recent, unproven one)
  uint64_t group = 1;               // launches sharing the mark it was judged by (itself included)
  bool pdl_group = false;           // that group holds a programmatic dependent (PDL) launch
  uint32_t reasons = 0;             // AttributionReason bits
  std::vector<size_t> graph_nodes;  // a graph launch: indices into FaultSnapshot::graph_nodes, in the table's order
  int graph_node_pick = -1;         // the position in graph_nodes of the one node the device's assert names
  // Which kernel node of the replay failed is not known: several and no pick, or a table cdsa could not follow
  // (device-side changes, a change it could not pair, nodes not kept).
  bool graph_nodes_ambiguous = false;
};

struct AttributionResult {
  Verdict verdict = Verdict::Unknown;
  std::vector<AttributedLaunch> candidates;  // in the order above (an order, not a likelihood)
  bool unmarked_streams_pending = false;     // a stream had launches without marks: it cannot be ruled out
  bool named_by_device_assert = false;       // the assert text picked the one candidate among several
  bool launches_in_flight = false;           // launches in flight kept the verdict from being exact
  bool graph_nodes_ambiguous = false;        // the one candidate is a replay whose failing node is not known
  // Launches in the ring on marked streams, and how many of them had a completion mark of their own (the others
  // shared one with the launch after them, or were the tail whose mark was still deferred).
  uint64_t launches_seen = 0, launches_own_mark = 0;
  bool marks_shared = false;          // some launch's mark was folded into the next one's (PDL) or lost
  uint32_t other_context_streams = 0;  // streams of other contexts with unfinished launches: not candidates
  uint32_t left_out_by_device_assert = 0;  // candidates dropped: several matched the assert text, these did not
  // The device's assert names a function that can be a kernel, and no candidate's kernel is it: the assert is in a
  // __device__ function a candidate calls, or the failing launch is one cdsa did not record. Never exact then.
  bool assert_matches_no_candidate = false;
  // The assert text names only functions that cannot be __global__ (operator(), a lambda, a class member): it tells
  // no candidate from another, and costs none its exactness.
  bool assert_names_no_kernel = false;
  // No candidate had a placed mark that failed to land: every one is a stream's tail whose mark was never placed (or
  // there is none), so the marks show no recorded launch unfinished when the context died. The fault may come from
  // work cdsa did not record (a memory operation or copy, a launch it could not see); not exact unless the assert
  // text names the one candidate's kernel.
  bool no_unfinished_evidence = false;
  // Streams whose copy, memset or memory operation may be what faulted (not a device-side assert: those are a
  // kernel's): then no launch is exact, and the list may not hold the cause.
  uint32_t stream_work_unproven = 0;
  // Work no record covers went by (stream_work_unseen) and the fault is not a device-side assert: no launch is exact.
  bool stream_work_unseen = false;
  // Launches recorded into a graphics command list (CIG capture) may have run since and faulted: no launch is exact.
  bool cig_work = false;
  // The program called an entry point cdsa passed through unwrapped that can submit work or change a stream or
  // graph (FaultSnapshot::passthrough_calls): what it did is not in the records, so the verdict is not exact.
  bool untracked_calls = false;
};

// Whether the snapshot's pass-through calls mean work cdsa never saw (a called thunk that can change work, or a
// pool that overflowed, so something was handed back raw).
bool has_untracked_work(const FaultSnapshot& snapshot);

AttributionResult attribute(const FaultSnapshot& snapshot);

// Which contexts hold the sticky error. The error is one context's (cuda.h on CUDA_ERROR_ILLEGAL_ADDRESS: "The
// context cannot be used, so it must be destroyed"), and every call naming that context or one of its streams
// answers it from then on ("any further CUDA work will return the same error"). So, asked after the fault surfaced:
//   Faulted  a call naming the context (or one of its streams) answered a sticky error: it may hold the fault;
//   Healthy  a call that surfaces the context's sticky error (cuStreamQuery of a stream the driver still says is
//            that context's) answered CUDA_SUCCESS or CUDA_ERROR_NOT_READY: it does not, so its work did not fail;
//   Unknown  no such answer (a NULL/legacy stream of a context not current, a destroyed handle, a refusal).
// `ask` asks one stream's context; `surfaced_ctx` is the context the surfacing call named (0: none), Faulted without
// asking. Each context that owns a stream in `streams` is asked through its streams in order until one answers
// Faulted or Healthy. A context never both: Faulted wins (a second fault elsewhere only widens the candidates).
enum class ContextAnswer : uint8_t { Unknown, Faulted, Healthy };
struct ContextJudgement {
  std::vector<uintptr_t> healthy;  // proven free of the sticky error: their streams are not candidates
  std::vector<uintptr_t> faulted;  // proven to hold it
};
ContextJudgement judge_contexts(const std::vector<StreamView>& streams, uintptr_t surfaced_ctx,
                                const std::function<ContextAnswer(const StreamView&)>& ask);

// Whether a kernel is the function the device's assert names: base::kernel_matches_assert_function (base/identifier.h).

}  // namespace cdsa
