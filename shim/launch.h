// What a wrapped launch does: record it, mark its completion, and hand sticky
// faults to the fault handler. Shared by the driver-interposition hooks and the
// CUPTI backend, so both feed the same recorder.
//
// Contract: called on the launching thread right after the real launch
// returned CUDA_SUCCESS. Lock-free and allocation-free after warm-up (except
// launches made while a stream captures a graph, which take a mutex).
#pragma once

#include <cuda.h>
#include <cstdint>
#include <vector>

#include "shim/recorder.h"

namespace cdsa {

struct LaunchInfo {
  LaunchKind kind = LaunchKind::Kernel;
  CUfunction func = nullptr;
  CUgraphExec graph_exec = nullptr;
  CUstream stream = nullptr;  // as the caller passed it
  bool per_thread = false;    // the entry point was a _ptsz/_ptds variant
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
};

// Warm-up on the first CUDA call: driver table, recorder, exit probe. `hint` is
// any real driver function pointer. Returns false when cdsa is disabled.
bool ensure_started(const void* hint) noexcept;
// Before a launch, while the context is surely alive: sets up breadcrumbs and
// caches the kernel's name (cheap after the first time for each).
void prepare_launch(CUfunction func) noexcept;
// Who reports a launch. While the CUPTI backend is active (cupti_tracer/backend.h)
// a launch the interposition wrappers report is dropped when the CUPTI callback
// of the same call already recorded it: each launch is recorded once.
enum class LaunchSource : uint8_t { Interposer, Cupti };
// Records a successful launch (enqueues its breadcrumb when not capturing).
void record_launch(const LaunchInfo& info, LaunchSource source = LaunchSource::Interposer) noexcept;

// Capture bookkeeping (graph attribution).
void note_capture_begin(CUstream stream, bool per_thread) noexcept;
void note_capture_end(CUstream stream, bool per_thread, CUgraph graph) noexcept;
void note_graph_instantiate(CUgraphExec exec, CUgraph graph) noexcept;
void note_stream_destroyed() noexcept;
// The launches captured under one capture id (report path; takes a mutex).
std::vector<LaunchRecord> captured_nodes(uint64_t capture_id);

// Reentrancy guard: cdsa's own driver calls made while handling a call.
struct InCdsa {
  InCdsa() noexcept;
  ~InCdsa();
  static bool active() noexcept;
};

}  // namespace cdsa
