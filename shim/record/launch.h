// The launch path: what a launch does, whichever front end saw it. Records it,
// marks its completion, and keeps the device's text when the mark meets a fault.
//
// The launch protocol, the same for every front end:
//   launch_begin(func)          before the real launch call, while the context is surely alive: sets up the
//                               breadcrumbs, caches the kernel's name, and holds the launch in flight
//                               (shim/common/thread_slots.h), so a fault report on another thread in between
//                               waits for its record (a report already past its snapshot drops it);
//   launch_succeeded(infos, n)  after the real call returned CUDA_SUCCESS: records each launch, then retires;
//   launch_failed()             after it failed: retires (the caller then surfaces a sticky fault).
// A front end with separate ENTER and EXIT callbacks (cupti_tracer/backend.cc) calls launch_begin in the first
// and one of the two others in the second; the driver wrappers (shim/intercept/interpose.cc) hold a LaunchScope.
//
// Contract: lock-free and allocation-free after warm-up (shim/intercept/lifecycle.h), except a launch made while
// its stream captures a graph, which is handed to shim/record/graph_capture.h (a mutex). It calls nothing above
// the record stage: a front end that must see each launch sets the launch filter.
//
//   LaunchScope launch(f, s, /*per_thread*/ false);
//   CUresult r = real_cuLaunchKernel(f, ...);
//   if (r == CUDA_SUCCESS) {
//     LaunchInfo li;
//     li.func = f; li.stream = s; li.grid[0] = 128; li.block[0] = 256;
//     launch.succeeded(li);
//   }  // else: the scope's end retires it
#pragma once

#include <cuda.h>
#include <cstdint>
#include <vector>

#include "shim/common/reentrancy.h"
#include "shim/common/thread_slots.h"
#include "shim/record/recorder.h"
#include "shim/record/stream_order.h"

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
  // Programmatic stream serialization (PDL): the launch may overlap the kernel before it on its stream. A
  // programmatic event alone does not make it so (it lets other work wait on this kernel's trigger).
  bool programmatic = false;
};

// Before any other call that puts work on, waits for, queries or captures `stream`: its deferred mark is enqueued.
// True when that enqueue met the sticky error: the stream's context was dead before the call, so the driver refuses
// the call's own work (it never runs, and cannot be what faulted).
bool before_stream_operation(CUstream stream, bool per_thread) noexcept;
// Device work on `stream` that is no launch and may fault (a copy, a memset, a memory operation), just before the
// driver sees it (after before_stream_operation): its place among the stream's launches is kept, so that the fault
// path knows a fault may be its (shim/fault/attribution.cc). Nothing while the stream captures (it runs at replay).
// NULL with per_thread false is the legacy stream: a synchronous copy, memset or launch (Kind::DefaultStreamWork).
// Begins the op's region of the stream's order (shim/record/stream_order.h): the caller ends it with
// end_thread_region() once the driver call returned.
void note_stream_work(CUstream stream, bool per_thread) noexcept;
// Work went by that no record covers (CUPTI alone: a call the entry-point table cannot describe, or one on a thread
// without its block); from then on no verdict is exact and the exit probe queries every context
// (shim/fault/exit_probe.cc).
void note_stream_work_unseen() noexcept;
bool stream_work_unseen() noexcept;
// Before a context (or every context) is destroyed or reset: every deferred mark this thread can place, and the
// streams' PDL events destroyed while their contexts live (shim/record/breadcrumbs.h).
void before_context_teardown() noexcept;
// Before cuStreamDestroy: the stream's deferred mark, and its PDL event destroyed.
void before_stream_destroy(CUstream stream, bool per_thread) noexcept;

// A successful synchronizing call proves that every launch submitted before it began finished: cuStreamSynchronize
// ("waits until the device has completed all operations in the stream") and cuStreamQuery's CUDA_SUCCESS ("all
// operations in the stream have completed") for its stream; cuCtxSynchronize[_v2] ("blocks until the ... context
// has completed all preceding requested tasks") for every stream of that context (StreamState::last_ctx). `begin`
// reads, before the call, how many launches each such stream has recorded (a launch is recorded after its driver
// call returned, so each of those was submitted before the synchronizing call); `succeeded`, after it returned
// CUDA_SUCCESS, makes that proof (StreamState::synced), and the same for the stream's copies, memsets and memory
// operations (StreamState::ops_synced). No driver call but cuCtxGetCurrent (for a NULL context);
// nothing is put on any stream, so no PDL pair of another thread is split. Allocates (not the launch path).
class SyncProof {
 public:
  static SyncProof stream(CUstream stream, bool per_thread) noexcept;  // also enqueues its deferred mark
  static SyncProof context(CUcontext ctx) noexcept;                    // nullptr: the current context
  void succeeded() const noexcept;

 private:
  struct Seen {
    int slot;
    uint64_t launched;
    uint64_t ops;  // StreamState::ops before the call: the copies, memsets and memory operations it proves too
  };
  std::vector<Seen> seen_;
};
// The context a cuCtxSynchronize[_v2] was about: `ctx`, or (NULL, or cuCtxSynchronize) the current one as
// cuCtxGetCurrent names it; 0 when it will not (a dead current context may refuse).
uintptr_t synchronized_context(CUcontext ctx) noexcept;
// The context cdsa knows for the stream (0 when cdsa has not seen a launch on it).
uintptr_t stream_context(CUstream stream, bool per_thread) noexcept;
// Who reports a launch: the interposition wrappers, or the CUPTI callback.
enum class LaunchSource : uint8_t { Interposer, Cupti };

// The parts of the protocol: prepare and record one successful launch (enqueues its breadcrumb when not
// capturing). Prepare runs before a launch, while the context is surely alive: it sets up breadcrumbs, caches the
// kernel's name and the stream's id (cheap after the first time for each): a kernel that faults before its launch
// call returns would make the driver refuse to name its stream afterwards, so the record keeps the id the stream
// had at launch. The protocol's calls below are inline over them, so a launch's stack, which the record captures,
// holds no frame more than the wrapper's.
// `mark`: what becomes of the stream's deferred breadcrumb (shim/record/breadcrumbs.h) before this launch: enqueued
// (Settle), or folded into this launch's own (Fold: a programmatic dependent launch, so that nothing of cdsa's sits
// between the two kernels), or left (Leave: a front end that sees the launch only in a callback inside the driver,
// CUPTI's; the driver wrappers settle it for every launch that passes them).
enum class MarkBefore : uint8_t { Leave, Settle, Fold };
void prepare_launch(CUfunction func, CUstream stream = nullptr, bool per_thread = false,
                    MarkBefore mark = MarkBefore::Leave) noexcept;
void record_launch(const LaunchInfo& info, LaunchSource source = LaunchSource::Interposer) noexcept;

// ---- the launch protocol (above) ----
// `stream` and `per_thread` as the launch call names its stream (the CUPTI callback may pass none: its record
// then resolves the stream after the call).
inline void launch_begin(CUfunction func, CUstream stream = nullptr, bool per_thread = false,
                         MarkBefore mark = MarkBefore::Leave) noexcept {
  prepare_launch(func, stream, per_thread, mark);
  LaunchInFlight::launch_submitting();
}
inline void launch_succeeded(const LaunchInfo* infos, int n, LaunchSource source) noexcept {
  for (int i = 0; i < n; ++i) record_launch(infos[i], source);
  end_thread_region();  // after the records and their marks (shim/record/stream_order.h)
  LaunchInFlight::launch_retired();  // after the records: whoever sees the flag drop sees them in the ring
}
inline void launch_failed() noexcept {
  end_thread_region();
  LaunchInFlight::launch_retired();
}

// The protocol for a front end that sees the whole call in one frame: begins at construction; `succeeded`
// records and retires; a scope left without it retires at its end (after the caller checked the result).
class LaunchScope {
 public:
  LaunchScope(CUfunction func, CUstream stream, bool per_thread, MarkBefore mark = MarkBefore::Settle) noexcept {
    launch_begin(func, stream, per_thread, mark);
  }
  ~LaunchScope() {
    if (!ended_) launch_failed();
  }
  void succeeded(const LaunchInfo& info) noexcept {
    ended_ = true;
    launch_succeeded(&info, 1, LaunchSource::Interposer);
  }
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

 private:
  bool ended_ = false;
};

// After cuModuleUnload / cuLibraryUnload succeeded: the handles' addresses may come back for other kernels, so the
// names cdsa cached by handle are dropped and asked again at the next launch of each (shim/record/recorder.h).
void note_module_unloaded() noexcept;

// A context was destroyed (cuCtxDestroy), or a primary one reset or released: the names cdsa cached by handle are
// dropped as after an unload, since the context's CUfunction handles are freed with it and the driver hands their
// addresses out again for other kernels (the sim does so on purpose). A primary release counts only when
// cuDevicePrimaryCtxGetState says the context is no longer active (the last reference; a failed query counts too:
// forgetting costs one lookup per handle, keeping a stale name a wrong one). `r`: the release's or reset's result.
void note_context_torn_down() noexcept;
void note_primary_context_released(CUdevice dev, CUresult r) noexcept;

// A kernel's name as a front end was told it (CUPTI's symbolName, valid only during its callback): interned at
// once (up to 511 bytes) for drivers without cuFuncGetName. Nothing happens when the handle has a name already,
// unless `replace`: the front end is the only one that sees the program's calls (CUPTI alone, no interposition),
// so no context teardown reaches cdsa, and a name that differs from the one kept replaces it (the handle's address
// was given to another kernel since). With interposition the wrappers forget names at each teardown and ask the
// driver before CUPTI's callback runs, so its name there only fills a gap. Nothing happens before warm-up.
void note_kernel_name(CUfunction func, const char* name, bool replace = false) noexcept;

// Asked for each launch the interposition wrappers report; returning true drops it (another front end, the
// CUPTI backend, already recorded this very call), so each launch is recorded once. Runs on the launch path:
// no lock, no allocation. nullptr (the default) keeps every launch. Set by cupti_tracer/backend.cc.
using LaunchFilter = bool (*)(const LaunchInfo& info) noexcept;
void set_launch_filter(LaunchFilter filter) noexcept;

// The StringTable id of the driver's name for a launch handle (a CUfunction, or a CUkernel cast to one), from the
// launch path's cache (asked once per handle); kNoString when unknown. For the graph calls' kernel nodes.
uint32_t kernel_name_id(const InCdsa&, CUfunction func) noexcept;

// A stream was destroyed: the per-thread stream caches go stale (its handle may be reused).
void note_stream_destroyed() noexcept;

}  // namespace cdsa
