// What a front end outside shim/ (cupti_tracer/backend.cc: CUPTI's driver-API callbacks) calls: the one header it
// includes. The launch protocol and the kernel-name note come from the launch path (shim/record/launch.h); warm-up
// and its start hook from shim/intercept/lifecycle.h; the configuration, cdsa's messages and the reentrancy guard
// from shim/common/. What else a front end needs is declared here, so it names no table, no fault path and no
// stack capture of its own.
//
// Contract: as the headers it includes say; `surface_driver_result` may run the fault report (milliseconds, it
// allocates), only when the process is already failing.
//
//   // ENTER of a launch callback       // EXIT
//   note_kernel_name(f, name, n);       if (r == CUDA_SUCCESS) launch_succeeded(li, n, LaunchSource::Cupti);
//   launch_begin(f);                    else { launch_failed(); surface_driver_result(r, data.functionName); }
#pragma once

#include <cuda.h>

#include "shim/common/config.h"
#include "shim/common/log.h"
#include "shim/common/reentrancy.h"
#include "shim/intercept/lifecycle.h"
#include "shim/record/launch.h"

namespace cdsa {

// A driver call's result, as a front end saw it: a sticky fault is reported (once per process, shim/fault/fault.h),
// anything else is left alone.
void surface_driver_result(CUresult r, const char* call) noexcept;
// The real dlsym of the C library (cdsa's own dlsym hook not in the way).
void* front_end_dlsym(void* handle, const char* name) noexcept;
// Whether `addr` lies inside libcdsa.so itself.
bool in_cdsa_code(const void* addr) noexcept;
// Whether this thread is inside a driver call one of cdsa's wrappers made (the wrapper records what it does).
bool in_wrapped_driver_call() noexcept;
// A stream capture the front end saw, which no wrapper did: begun on `stream` (after the driver accepted it), and
// ended (`graph`: what it made, null when it failed). As the wrappers note them (shim/record/graph_capture.h).
// `recapture_of`: cuStreamBeginRecaptureToGraph's graph, whose nodes the capture replaces (null: a capture).
void capture_begun(CUstream stream, bool per_thread, CUgraph recapture_of = nullptr) noexcept;
// Before a context teardown (cuCtxDestroy, cuDevicePrimaryCtxRelease/Reset), from its wrapper or, where no wrapper
// sees the call, from a front end at its API enter: its streams are asked whether a fault no call surfaced is there
// (reported now, as surfaced at `call`, with the driver's own code, while the context can still answer), then the
// deferred marks and the PDL events go before the context does.
void before_teardown(const char* call) noexcept;
void capture_ended(CUstream stream, bool per_thread, CUgraph graph) noexcept;

// What a driver call does to the streams, for a front end that sees calls no wrapper of cdsa's does (CUPTI alone):
// by the call's exported name (CUPTI's functionName) and its parameter block (CUPTI's <name>_params, the arguments
// in order in C layout), as the entry-point table's kind of it says (shim/intercept/driver_calls.def):
//   Stream         device work on `stream` that may fault (a copy, a memset, a memory operation): StreamWork
//   DefaultStream  the same on the NULL stream (a synchronous copy or memset): DefaultStreamWork, SyncCopyToHost
//   StreamSync     a synchronizing call on `stream`; CtxSync on `ctx` (null: the current context)
//   StreamOp       any other call that puts something on `stream` or waits for it (its deferred mark goes first)
//   StreamDestroy  `stream` destroyed (null: a context destroyed, released or reset, and its streams with it): the
//                  stream handles may be reused after it
//   Unknown        a name the table lacks that may submit work, or a work call without its parameters: no record
//                  covers what it did (note_stream_work_unseen)
// `per_thread`: a _ptsz/_ptds entry point. Pure, lock-free, allocation-free (call_work.cc).
struct CallWork {
  enum What { None, Stream, DefaultStream, StreamSync, CtxSync, StreamOp, StreamDestroy, Unknown } what = None;
  CUstream stream = nullptr;
  bool names_stream = false;  // the call has a stream argument, read into `stream`
  CUcontext ctx = nullptr;
  bool per_thread = false;
};
CallWork call_work(const char* symbol, const void* params) noexcept;
// Where call_work reads the stream of `symbol` in its parameter block (-1: no stream, or not in the table): for
// the checks against CUPTI's own structs (cupti_tracer/decode.cc).
int call_work_stream_offset(const char* symbol) noexcept;

}  // namespace cdsa
