// Graph-capture bookkeeping, for attributing a fault in a graph replay: which
// launches were captured into which graph, and which executable graph came
// from which capture.
//
// While a stream captures, each launch on it is recorded (with its stack) but
// not run; it gets the capture's id. cuStreamEndCapture ties the id to the
// CUgraph, cuGraphInstantiate ties it to the CUgraphExec, and a later
// cuGraphLaunch of that exec carries the id, so the report can list the
// graph's captured kernel nodes with their capture-time stacks. cuGraphDestroy
// and cuGraphExecDestroy forget their handle; with the last handle that names a
// capture (its graph and every exec instantiated from it) the capture is
// retired: its nodes stay for a report about a launch still running, and are
// the first to go when the bound below needs room.
//
// Contract: setup-time work under one mutex (capture begin/end, instantiate,
// a launch made while capturing, and the report's `captured_nodes`), never
// on the path of an ordinary launch: that path reads only `captures_active()`,
// one atomic load. Everything is a no-op before `graph_capture_init` (warm-up).
// At most 65,536 captured launches are kept (retired captures' first).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "shim/record/recorder.h"
#include "shim/common/reentrancy.h"

namespace cdsa {

void graph_capture_init() noexcept;

void note_capture_begin(CUstream stream, bool per_thread) noexcept;
void note_capture_end(CUstream stream, bool per_thread, CUgraph graph) noexcept;
void note_graph_instantiate(CUgraphExec exec, CUgraph graph) noexcept;
// Before the driver destroys the handle (it may then come back for another graph).
void note_graph_destroy(CUgraph graph) noexcept;
void note_graph_destroy(CUgraphExec exec) noexcept;

namespace graph_capture_internal {
[[gnu::visibility("hidden")]] extern std::atomic<int> g_captures_active;
}  // namespace graph_capture_internal
// Whether any stream is capturing now (the launch path asks before cuStreamIsCapturing).
inline bool captures_active() noexcept {
  return graph_capture_internal::g_captures_active.load(std::memory_order_acquire) > 0;
}

// A launch made while its stream captures: sets r->graph_id to the capture's id and keeps the record as a node
// of that graph. Takes the mutex.
void note_captured_launch(const InCdsa&, LaunchRecord* r) noexcept;

// The launches captured under one capture id (report path; takes the mutex, allocates).
std::vector<LaunchRecord> captured_nodes(uint64_t capture_id);

}  // namespace cdsa
