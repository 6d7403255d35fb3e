// The launch path: what a wrapped launch does. Records it, marks its
// completion, and keeps the device's text when the mark meets a fault. Shared
// by the driver-interposition hooks and the CUPTI backend, so both feed the
// same recorder.
//
// Contract: `record_launch` is called on the launching thread right after the
// real launch returned CUDA_SUCCESS. Lock-free and allocation-free after
// warm-up (shim/intercept/lifecycle.h), except a launch made while its stream captures a
// graph, which is handed to shim/record/graph_capture.h (a mutex). It calls nothing
// above it: a front end that must see each launch sets the launch filter.
//
// The caller holds a LaunchInFlight (shim/record/assert_capture.h) from before the real
// launch until record_launch returns, so a fault report on another thread in
// between waits for the record; a report already past its snapshot drops it.
//
//   LaunchInfo li;
//   li.func = f; li.stream = s; li.grid[0] = 128; li.block[0] = 256;
//   LaunchInFlight in_flight;
//   if (real_cuLaunchKernel(...) == CUDA_SUCCESS) record_launch(li);
#pragma once

#include <cuda.h>
#include <cstdint>

#include "shim/record/recorder.h"

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

// Before a launch, while the context is surely alive: sets up breadcrumbs,
// caches the kernel's name and the stream's id (cheap after the first time for
// each): a kernel that faults before its launch call returns would make the
// driver refuse to name its stream afterwards, so the record keeps the id the
// stream had at launch.
void prepare_launch(CUfunction func, CUstream stream = nullptr, bool per_thread = false) noexcept;
// Who reports a launch: the interposition wrappers, or the CUPTI callback.
enum class LaunchSource : uint8_t { Interposer, Cupti };
// Records a successful launch (enqueues its breadcrumb when not capturing).
void record_launch(const LaunchInfo& info, LaunchSource source = LaunchSource::Interposer) noexcept;

// Asked for each launch the interposition wrappers report; returning true drops it (another front end, the
// CUPTI backend, already recorded this very call), so each launch is recorded once. Runs on the launch path:
// no lock, no allocation. nullptr (the default) keeps every launch. Set by cupti_tracer/backend.cc.
using LaunchFilter = bool (*)(const LaunchInfo& info) noexcept;
void set_launch_filter(LaunchFilter filter) noexcept;

// A stream was destroyed: the per-thread stream caches go stale (its handle may be reused).
void note_stream_destroyed() noexcept;

}  // namespace cdsa
