// Attribution: which launch failed. The decision cdsa exists for, as a pure
// function of a FaultSnapshot (shim/fault/fault_snapshot.h): no symbolizer, no
// wording, no global state. shim/fault/report_builder.h words the result.
//
// The rule (docs/attribution.md): on each stream whose every launch got a
// breadcrumb, the first launch whose mark never landed is the only one that
// can have failed there. One such stream: exact. Several: each gives a
// candidate, oldest launch first; when the device's assert text names a
// function that exactly one candidate's kernel is (the same whole identifier), that one is kept.
// Programmatic dependent launch (shim/record/breadcrumbs.h): launches can share one mark (a PDL chain, a
// failed mark, a stream's tail whose mark was still deferred). The first unfinished launch is then one of the group
// sharing the first mark that never landed: every member is a candidate, and the assert text picks among them as
// among streams. A landed mark after a PDL launch proves that the kernels before it in its group finished only
// because it was enqueued behind an event recorded after the group and waited on (shim/record/breadcrumbs.h;
// StreamView::pdl_unproven): a plain memop there might not wait for a primary (kLandedPdlMarkProvesPrimary). A group
// whose wait could not be placed keeps those kernels as candidates, marked unproven, listed last. Only the faulting
// context's streams count (FaultSnapshot::fault_ctx).
// A stream without marks cannot be ruled out, so the verdict is then never
// exact; nor while another thread has a launch in flight (submitted, not yet
// recorded), since the failing launch may be that one; nor once the program called an entry point cdsa could only
// pass through (a version newer than its headers) that can submit work: that work is in no record. With nothing pending
// that the marks can see, the three most recent launches are shown, unproven.
//
// Contract: pure and deterministic; allocates the result; thread-safe.
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
  kReasonPdlUnproven = 1u << 7,          // before a PDL launch whose mark landed: its own end is not proven
};

// Whether a landed mark after a PDL secondary proves that its primary finished. Not documented, so no:
// - cuda.h (13.0), CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the grid may "overlap with the previous
//   kernel in the stream"; the dependent "can choose to wait" with cudaGridDependencySynchronize(). Nothing says
//   what the operation after the dependent waits for.
// - CUDA Programming Guide 13, section 4.5 (Programmatic Dependent Launch and Synchronization): the secondary may
//   launch before the primary "has finished executing"; again nothing on later operations.
// - cuStreamWriteValue32/64 (cuda.h): no ordering statement at all beyond being a stream operation.
// So a PDL group's mark is made to prove it, by documented semantics: cuEventRecord "captures in hEvent the contents
// of hStream" and cuStreamWaitEvent makes later work "wait for all work captured", so the mark enqueued after an
// event recorded on the stream and waited on by it lands only after the primary too (shim/record/breadcrumbs.cc;
// two calls more per PDL group; GPU case 25b2 checks it on hardware: "placement waited"). This constant is for a
// mark enqueued without that wait (the event could not be made or recorded): case 25b2's plain memop answer,
// "memop_waits_for_primary yes" on every driver the suite ran on, is what flipping it needs (never the sim).
inline constexpr bool kLandedPdlMarkProvesPrimary = false;

struct AttributedLaunch {
  int ring_index = -1;  // into FaultSnapshot::ring; -1 when the record was overwritten
  uint64_t stream_id = 0;
  uint64_t stream_seq = 0;
  uint64_t pending = 0;             // launches on its stream whose mark never landed (0 for a recent, unproven one)
  uint64_t group = 1;               // launches sharing the mark it was judged by (itself included)
  uint32_t reasons = 0;             // AttributionReason bits
  std::vector<size_t> graph_nodes;  // a graph launch: indices into FaultSnapshot::graph_nodes, in the table's order
  int graph_node_pick = -1;         // the position in graph_nodes of the one node the device's assert names
  // Which kernel node of the replay failed is not known: several and no pick, or a table cdsa could not follow
  // (device-side changes, a change it could not pair, nodes not kept).
  bool graph_nodes_ambiguous = false;
};

struct AttributionResult {
  Verdict verdict = Verdict::Unknown;
  std::vector<AttributedLaunch> candidates;  // most likely first
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
  // Candidates kept only because a landed mark after a PDL launch, enqueued without its event wait, is not proof
  // (kReasonPdlUnproven); listed last.
  uint32_t pdl_unproven = 0;
  // The program called an entry point cdsa passed through unwrapped that can submit work or change a stream or
  // graph (FaultSnapshot::passthrough_calls): what it did is not in the records, so the verdict is not exact.
  bool untracked_calls = false;
};

// Whether the snapshot's pass-through calls mean work cdsa never saw (a called thunk that can change work, or a
// pool that overflowed, so something was handed back raw).
bool has_untracked_work(const FaultSnapshot& snapshot);

AttributionResult attribute(const FaultSnapshot& snapshot);

// Whether the kernel named `kernel` (mangled "_Z...", or plain) is the function an assert line names: the same whole
// identifier (base/identifier.h), compared demangled, never a part of a longer one ("kernel" does not name
// "_Z13kernel_helperPi").
bool kernel_matches_assert_function(std::string_view kernel, std::string_view function);

}  // namespace cdsa
