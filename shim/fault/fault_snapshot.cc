#include "shim/fault/fault_snapshot.h"

#include <set>

#include "shim/record/assert_capture.h"
#include "shim/record/breadcrumbs.h"
#include "shim/record/graph_capture.h"

namespace cdsa {

std::vector<StreamView> stream_views() {
  std::vector<StreamView> out;
  for (uint32_t i = 0; i < stream_capacity(); ++i) {
    StreamState* st = stream_state(static_cast<int>(i));
    if (!st) break;
    uint64_t id = st->id.load(std::memory_order_acquire);
    if (id == 0) continue;
    uint64_t launched = st->launched.load(std::memory_order_acquire);
    if (launched == 0) continue;
    uint64_t marked = st->breadcrumb_launched.load(std::memory_order_acquire);
    if (marked > launched) marked = launched;
    StreamView v{static_cast<int>(i), id - 1, launched, breadcrumb_landed(static_cast<int>(i), marked),
                 breadcrumbs_active()};
    v.marked = marked;
    v.ctx = st->last_ctx.load(std::memory_order_relaxed);
    out.push_back(v);
  }
  return out;
}

FaultSnapshot take_fault_snapshot(const InCdsa&) {
  FaultSnapshot s;
  // From here on no stack or string is reclaimed: the ids copied below, and those the report reads later
  // (surfaced stack, profile), keep naming what they named now.
  recorder_hold_reclaim();
  ring_snapshot(&s.ring);
  s.streams = stream_views();
  s.breadcrumbs_active = breadcrumbs_active();
  s.asserts = base::parse_device_asserts(kept_device_text() + captured_driver_stderr());
  std::set<uint64_t> graphs;
  for (const auto& r : s.ring) {
    if (r.kernel_name != kNoString) s.kernel_names.emplace(r.kernel_name, string_at(r.kernel_name));
    if (r.kind == LaunchKind::Graph && r.graph_id != 0) graphs.insert(r.graph_id);
  }
  for (uint64_t g : graphs) {
    GraphTableInfo info;
    for (auto& node : graph_nodes(g, &info)) {
      s.graph_nodes.push_back(node.launch);
      if (node.launch.kernel_name != kNoString)
        s.kernel_names.emplace(node.launch.kernel_name, string_at(node.launch.kernel_name));
      s.graph_node_records.push_back(node);
    }
    s.graph_tables[g] = info;
  }
  const char* overflow = recorder_overflow_note();
  if (overflow) s.recorder_overflow = overflow;
  return s;
}

}  // namespace cdsa
