// The plain copy of everything the fault's attribution and its report read: taken once, when the fault surfaces
// (or at exit, for the CDSA_TRACE=always file), so that `attribute()` (shim/fault/attribution.h) is a pure
// function of values, the report builder (shim/fault/report_builder.h) reads no live table, and both can be
// tested on snapshots written by hand. Launches, graph nodes and profile rows keep the recorder's ids; the names
// and stacks those ids stand for are copied beside them.
//
// Contract: plain values, no pointers into cdsa's tables. `take_fault_snapshot`
// runs on the report path (allocates, takes the graph-capture mutex) under the
// reentrancy guard; it makes no CUDA call, so it works on a dead context. It
// first stops the recorder's reclamation for good (recorder_hold_reclaim), so
// the stack and string ids it copies (and the surfaced stack's, the profile's)
// name the same entries for the rest of the report and the trace.
//
//   FaultSnapshot s;                       // a hand-made one, as the unit tests write them
//   s.ring.push_back(rec);                 // rec.stream_id = 7, rec.stream_seq = 3
//   s.streams.push_back({0, 7, /*launched*/ 3, /*landed*/ 2, /*marks*/ true});
//   AttributionResult a = attribute(s);    // exact: the ring's record 0
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/device_assert.h"
#include "report/fault_report.h"
#include "shim/record/device_info.h"
#include "shim/record/graph_capture.h"
#include "shim/record/launch_clock.h"
#include "shim/record/profile.h"
#include "shim/record/recorder.h"
#include "shim/common/passthrough.h"
#include "shim/common/reentrancy.h"

namespace cdsa {

using base::DeviceAssert;

// One stream as its breadcrumbs see it.
struct StreamView {
  int slot = -1;          // StreamTable index
  uint64_t id = 0;        // cuStreamGetId
  uint64_t launched = 0;  // launches recorded on it (the last stream_seq handed out)
  uint64_t landed = 0;    // the last stream_seq whose completion mark landed
  bool marks = false;     // its launches get breadcrumbs, so `landed` is meaningful
  // The last stream_seq whose mark was placed (shim/record/breadcrumbs.h): the launches after it (the tail) have
  // no mark placed after them, so nothing shows whether they finished. Left at kAllMarked (hand-made snapshots):
  // every launch's mark was placed. Invariant (stream_views): landed <= marked <= launched.
  static constexpr uint64_t kAllMarked = UINT64_MAX;
  uint64_t marked = kAllMarked;
  // The last stream_seq that a successful synchronizing call proved finished (StreamState::synced); 0: none.
  uint64_t synced = 0;
  // The CUcontext the stream belongs to, as the driver named it at the stream's first launch (cuStreamGetCtx; the
  // NULL, legacy and per-thread streams: the current context); 0: unknown.
  uintptr_t ctx = 0;
  // Device work on it that is no launch and may fault (StreamState::op_at, ops_forgotten: a position is `launched`
  // when it was submitted, plus one; 0: none): the last few, and the highest position among the older ones.
  static constexpr uint32_t kOpsKept = 4;  // StreamState::kOpsKept
  uint64_t op_at[kOpsKept] = {};
  uint64_t ops_forgotten = 0;
  // How many such ops the stream had (op n sat in slot n % 4), and how many of the first a successful synchronizing
  // call proved finished (StreamState::ops_synced). 0 in hand-made snapshots that set op_at alone: nothing proven.
  uint64_t ops = 0, ops_synced = 0;
  // Whether the op in slot k is proven finished by a sync: the newest op the slot can hold (the highest number below
  // `ops` in its residue class; an older one there is proven whenever that one is) is numbered below ops_synced.
  bool op_synced(uint32_t k) const {
    if (ops <= k) return false;
    const uint64_t newest = ops - 1 - ((ops - 1 - k) % kOpsKept);
    return newest < ops_synced;
  }
  // ... and every op that left the slots (each numbered below ops - kOpsKept).
  bool forgotten_synced() const { return ops >= kOpsKept && ops - kOpsKept <= ops_synced; }
  // Several threads put work on the stream at the same time (shim/record/stream_order.h): `raced_to` is one past the
  // launches it had recorded when the last region that overlapped another exited (0: none did); `racing`, such a
  // region was open when the view was taken. Either way its launches, marks and ops after `proven()` may not be in
  // the stream's order (raced()). Hand-made snapshots leave both: never raced.
  uint64_t raced_to = 0;
  bool racing = false;
  // Its handle names another stream in the thread that took the view: another thread's per-thread default stream
  // (CU_STREAM_PER_THREAD is the calling thread's own). A query can then answer only for its context (a sticky error
  // is the context's), never whether the stream itself finished. Hand-made snapshots leave it: queryable.
  bool foreign = false;
  // Not a stream but the exit probe's stand-in for its context `ctx` (shim/fault/exit_probe.h): work no record
  // covers may be anywhere in it, so it is queried through the context's NULL stream. Never in a snapshot.
  bool whole_context = false;
  // The last stream_seq proven finished: by a landed mark that was placed, or by a successful synchronizing call.
  uint64_t proven() const {
    const uint64_t m = marked < launched ? marked : launched;
    const uint64_t by_mark = landed < m ? landed : m, by_sync = synced < launched ? synced : launched;
    return by_mark > by_sync ? by_mark : by_sync;
  }
  // Whether what is left unproven on the stream may be out of its order: a landed mark still proves every launch
  // numbered at or below it (each was recorded, so submitted, before the mark was enqueued), and a sync what it read
  // before it began; nothing else of the marks holds (which launches a mark follows, which mark the slot shows last).
  bool raced() const { return racing || proven() < raced_to; }
  // Whether some of that work sits after every launch its marks or a sync prove finished (so nothing shows it ran).
  bool work_after_proof() const {
    const uint64_t p = proven();
    for (uint32_t k = 0; k < kOpsKept; ++k)
      if (op_at[k] && op_at[k] - 1 >= p && !op_synced(k)) return true;
    return ops_forgotten && ops_forgotten - 1 >= p && !forgotten_synced();
  }
  // Whether everything on it is proven finished, by landed marks or a sync: every launch, and every op after them.
  bool done() const { return proven() >= launched && !work_after_proof(); }
};

// An interned stack as the snapshot keeps it: the native return addresses (symbolized later, by the report
// builder) and the Python frames with their strings.
struct SnapshotPyFrame {
  std::string file, function;
  int line = 0;
};
struct SnapshotStack {
  std::vector<uintptr_t> native;          // innermost first
  std::vector<SnapshotPyFrame> python;    // innermost first
};

// What the fault itself is, as the report's head states it (report::FaultReport's head fields alone: code,
// error_name, error_string, surfaced_call, surfaced_tid, fault_time_unix_ns, launches_recorded), taken when it
// surfaced; the report builder starts the report from it. The exit-time trace of CDSA_TRACE=always has none.
using FaultFacts = report::FaultReport;

struct FaultSnapshot {
  FaultFacts fault;
  std::vector<LaunchRecord> ring;                // the launch ring, oldest first
  LaunchClockReading clock;  // makes the records' stamps CLOCK_MONOTONIC ns (default: they are already)
  // StringTable id -> kernel name, for the ring's records, the graph nodes and the profile rows.
  std::map<uint32_t, std::string> kernel_names;
  // Stack id -> the stack, for every id the ring, the graph nodes, the profile rows and surfaced_stack name.
  std::map<uint32_t, SnapshotStack> stacks;
  std::vector<StreamView> streams;               // streams with at least one launch
  bool breadcrumbs_active = false;
  std::vector<DeviceAssert> asserts;      // the device's assert lines the driver printed, parsed
  std::vector<LaunchRecord> graph_nodes;  // the kernel nodes of every node table launched in `ring`
  // Beside graph_nodes, index for index: how each node was made or last changed (empty in hand-made snapshots).
  std::vector<GraphNodeRecord> graph_node_records;
  std::map<uint64_t, GraphTableInfo> graph_tables;  // what limits each launched node table
  std::map<uint32_t, std::string> call_names;  // StringTable id -> name, for graph_node_records' calls
  // Launches another thread has submitted to the driver but not recorded yet: the failing one may be among
  // them, outside the ring (what the fault path counted before the snapshot).
  uint32_t launches_in_flight = 0;
  std::string recorder_overflow;  // what filled up in the recorder's tables, or empty
  // Contexts the fault path proved free of the sticky error (judge_contexts, shim/fault/attribution.h): after the
  // fault surfaced, a call naming one of its streams answered without it. Their streams' launches are not candidates;
  // every other context's are: the faulting one's, and those the driver would not answer for (never a guess).
  std::vector<uintptr_t> healthy_ctx;
  // The one context proven to hold the sticky error (the surfacing call named it, or a probe of it answered the
  // error), and its cuCtxGetId as a record on one of its streams has it: the report's GPU is its device. 0: none
  // proven, or several.
  uintptr_t fault_ctx = 0;
  uint32_t fault_ctx_id = 0;
  uint32_t surfaced_stack = kUnknownStack;  // the stack of the call that surfaced the fault
  // Entry points cdsa handed back as pass-through thunks (shim/common/passthrough.h) that the program called, and
  // the CUDA version of the headers cdsa's wrappers come from (cuda.h's CUDA_VERSION). A called one that can
  // submit work or change a stream or graph (changes_work), or a full thunk pool, means launches and marks cdsa
  // never saw: no verdict is exact.
  std::vector<PassthroughCall> passthrough_calls;
  bool passthrough_pool_exhausted = false;
  // Work went by that no record covers (CUPTI alone: a call the entry-point table cannot describe;
  // shim/record/launch.h stream_work_unseen): it may be what faulted.
  bool stream_work_unseen = false;
  // A CIG capture ended (shim/record/graph_capture.h cig_work_recorded): its launches run when a graphics API submits
  // them, outside CUDA's streams, where no record or mark of cdsa's follows them.
  bool cig_work = false;
  // A stream found no entry in the stream table (shim/record/recorder.h stream_table_overflowed): work on it is in no
  // stream's view, so the candidates may not hold the culprit.
  bool stream_table_full = false;
  int header_version = 0;
  bool has_profile = false;                 // CDSA_PROFILE was on: `profile` holds its rows
  ProfileRows profile;
  // The GPU of each context the ring's records ran on, as context_device answered for it (key 0: the first device
  // noted), for the report's origin line: the device of the failing launch's context.
  std::map<uint32_t, DeviceInfo> devices;
};

// `fault`: the facts of the fault (none at exit); `surfaced_stack`: the interned stack of the call that surfaced
// it (kUnknownStack at exit); `launches_in_flight`: what the fault path counted (shim/common/thread_slots.h).
FaultSnapshot take_fault_snapshot(const InCdsa&, const FaultFacts& fault = {}, uint32_t surfaced_stack = kUnknownStack,
                                  uint32_t launches_in_flight = 0);

// The streams with launches, as the breadcrumbs see them now (the exit probe polls them: shim/fault/exit_probe.h).
std::vector<StreamView> stream_views();

}  // namespace cdsa
