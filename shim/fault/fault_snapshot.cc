#include "shim/fault/fault_snapshot.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <set>

#include "base/check.h"

#include "shim/record/assert_capture.h"
#include "shim/record/breadcrumbs.h"
#include "shim/record/graph_capture.h"
#include "shim/record/launch.h"
#include "shim/record/stream_order.h"

namespace cdsa {

std::vector<StreamView> stream_views() {
  std::vector<StreamView> out;
  const auto me = static_cast<uint32_t>(syscall(SYS_gettid));
  for (uint32_t i = 0; i < stream_capacity(); ++i) {
    StreamState* st = stream_state(static_cast<int>(i));
    if (!st) break;
    uint64_t id = st->id.load(std::memory_order_acquire);
    if (id == 0) continue;
    // First whether regions of the stream's order overlapped (shim/record/stream_order.h): one open now is seen so,
    // and one that exited before raised raced_to before it did; what it touched is then read below.
    const bool racing = other_regions_open(st) || own_region_overlapped(st);
    const uint64_t raced_to = st->raced_to.load(std::memory_order_acquire);
    // Read in this order, each value only ever rises: synced and marked before launched keeps both at or below it
    // (each is raised to a number already handed out).
    uint64_t synced = st->synced.load(std::memory_order_acquire);
    uint64_t marked = st->breadcrumb_launched.load(std::memory_order_acquire);
    uint64_t launched = st->launched.load(std::memory_order_acquire);
    const bool ops = st->ops.load(std::memory_order_acquire) > 0;
    if (launched == 0 && !ops) continue;  // a stream with only a copy or memory operation on it is kept: it may fault
    CDSA_DCHECK(marked <= launched && synced <= launched);
    uint64_t landed = breadcrumb_landed(static_cast<int>(i), marked);
    // A mark can land before its placement is counted (the raise follows the driver's return), and after `launched`
    // was read: a landed mark was placed, and it proves every launch up to it.
    if (landed > marked) marked = landed;
    if (marked > launched) marked = landed = launched;
    StreamView v{static_cast<int>(i), id - 1, launched, landed, breadcrumbs_active()};
    v.marked = marked;
    v.synced = synced;
    v.racing = racing;
    v.raced_to = raced_to;
    v.ctx = st->last_ctx.load(std::memory_order_relaxed);
    v.foreign = reinterpret_cast<CUstream>(st->last_handle.load(std::memory_order_relaxed)) == CU_STREAM_PER_THREAD &&
                st->last_tid.load(std::memory_order_relaxed) != me;
    static_assert(StreamView::kOpsKept == StreamState::kOpsKept);
    // ops_synced first and the op count last (each only rises; a note raises the count before it fills its slot):
    // every op seen in a slot or in ops_forgotten is numbered below the count read, and the proof is no newer than
    // what it proves (StreamView::op_synced reads each slot's op as the newest it can be).
    v.ops_synced = st->ops_synced.load(std::memory_order_acquire);
    for (uint32_t k = 0; k < StreamState::kOpsKept; ++k) v.op_at[k] = st->op_at[k].load(std::memory_order_acquire);
    v.ops_forgotten = st->ops_forgotten.load(std::memory_order_acquire);
    v.ops = st->ops.load(std::memory_order_acquire);
    if (v.ops_synced > v.ops) v.ops_synced = v.ops;
    CDSA_DCHECK(v.landed <= v.marked && v.marked <= v.launched);
    out.push_back(v);
  }
  return out;
}

namespace {

// Copies what `id` stands for in the recorder's tables (nothing for an unknown or unreadable id).
void copy_stack(uint32_t id, FaultSnapshot* s) {
  if (id == kUnknownStack || s->stacks.count(id)) return;
  Stack live;
  if (!stack_at(id, &live)) return;
  SnapshotStack& out = s->stacks[id];
  out.native = std::move(live.native);
  for (const auto& f : live.python) out.python.push_back({string_at(f.file), string_at(f.function), f.line});
}

void copy_name(uint32_t id, FaultSnapshot* s) {
  if (id != kNoString) s->kernel_names.emplace(id, string_at(id));
}

}  // namespace

FaultSnapshot take_fault_snapshot(const InCdsa&, const FaultFacts& fault, uint32_t surfaced_stack,
                                  uint32_t launches_in_flight) {
  FaultSnapshot s;
  s.fault = fault;
  // From here on no stack or string is reclaimed: the ids copied below, and those the report reads later
  // (surfaced stack, profile), keep naming what they named now.
  recorder_hold_reclaim();
  s.surfaced_stack = surfaced_stack;
  s.launches_in_flight = launches_in_flight;
  ring_snapshot(&s.ring);
  s.clock = launch_clock_reading();
  s.streams = stream_views();
  s.breadcrumbs_active = breadcrumbs_active();
  s.asserts = base::parse_device_asserts(kept_device_text() + captured_driver_stderr());
  std::set<uint64_t> graphs;
  for (const auto& r : s.ring)
    if (r.kind == LaunchKind::Graph && r.graph_id != 0) graphs.insert(r.graph_id);
  for (uint64_t g : graphs) {
    GraphTableInfo info;
    for (auto& node : graph_nodes(g, &info)) {
      s.graph_nodes.push_back(node.launch);
      s.graph_node_records.push_back(node);
      if (node.call != kNoString) s.call_names.emplace(node.call, string_at(node.call));
      if (node.update_call != kNoString) s.call_names.emplace(node.update_call, string_at(node.update_call));
      copy_stack(node.update_stack, &s);
    }
    s.graph_tables[g] = info;
  }
  s.has_profile = profile_snapshot(&s.profile);
  for (const auto* records : {&s.ring, &s.graph_nodes})
    for (const auto& r : *records) {
      copy_name(r.kernel_name, &s);
      copy_stack(r.stack_id, &s);
    }
  for (const auto& row : s.profile.rows) {
    copy_name(row.kernel_name, &s);
    copy_stack(row.stack_id, &s);
  }
  copy_stack(surfaced_stack, &s);
  passthrough_called(&s.passthrough_calls);
  s.passthrough_pool_exhausted = passthrough_pool_exhausted();
  s.stream_work_unseen = stream_work_unseen();
  s.cig_work = cig_work_recorded();
  s.stream_table_full = stream_table_overflowed();
  s.header_version = CUDA_VERSION;
  const char* overflow = recorder_overflow_note();
  if (overflow) s.recorder_overflow = overflow;
  std::set<uint32_t> contexts = {0};
  for (const auto& r : s.ring) contexts.insert(r.ctx_id);
  for (uint32_t ctx : contexts) {
    DeviceInfo dev;
    if (context_device(ctx, &dev)) s.devices[ctx] = dev;
  }
  return s;
}

}  // namespace cdsa
