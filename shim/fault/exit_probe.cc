// The exit probe (exit_probe.h has its poll): at exit, a sticky fault that no call of the program surfaced is found
// and reported, also when the driver was already torn down; then the CDSA_TRACE=always (or profile) file.
#include "shim/fault/exit_probe.h"

#include <unistd.h>
#include <ctime>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "report/trace_enums.h"
#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/common/passthrough.h"
#include "shim/common/reentrancy.h"
#include "shim/fault/attribution.h"
#include "shim/fault/fault.h"
#include "shim/fault/fault_internal.h"
#include "shim/fault/python_bridge.h"
#include "shim/fault/report_builder.h"
#include "shim/record/assert_capture.h"
#include "shim/record/breadcrumbs.h"
#include "shim/record/launch.h"
#include "shim/record/recorder.h"

namespace cdsa::fault_internal {
namespace {

// Work no record and no mark covers (copies and memops under CUPTI alone; a launch through a pass-through entry
// point): a stream that looks finished may still hold the fault, so every stream is queried.
bool work_unseen() {
  std::vector<PassthroughCall> passed;
  passthrough_called(&passed);
  bool unseen = stream_work_unseen() || passthrough_pool_exhausted();
  for (const auto& p : passed) unseen = unseen || p.changes_work;
  return unseen;
}

// The contexts work no record covers may sit in (work_unseen): those of the streams seen, the current one, and each
// device's primary context while it is active (its handle through a retain that is released at once, never one
// that would make it). A view each (StreamView::whole_context), queried through its NULL stream.
std::vector<StreamView> context_views(const std::vector<StreamView>& streams) {
  const Driver& d = driver();
  std::set<uintptr_t> ctxs;
  for (const StreamView& s : streams)
    if (s.ctx) ctxs.insert(s.ctx);
  CUcontext current = nullptr;
  if (d.CtxGetCurrent && d.CtxGetCurrent(&current) == CUDA_SUCCESS && current)
    ctxs.insert(reinterpret_cast<uintptr_t>(current));
  int devices = 0;
  if (d.DeviceGetCount && d.DevicePrimaryCtxGetState && d.DevicePrimaryCtxRetain && d.DevicePrimaryCtxRelease &&
      d.DeviceGetCount(&devices) == CUDA_SUCCESS) {
    for (int dev = 0; dev < devices; ++dev) {
      unsigned flags = 0;
      int active = 0;
      CUcontext ctx = nullptr;
      if (d.DevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active) continue;
      if (d.DevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) continue;
      d.DevicePrimaryCtxRelease(dev);  // the program's own retain keeps it (it was active)
      if (ctx) ctxs.insert(reinterpret_cast<uintptr_t>(ctx));
    }
  }
  std::vector<StreamView> out;
  for (uintptr_t c : ctxs) {
    StreamView v;
    v.whole_context = true;
    v.ctx = c;
    out.push_back(v);
  }
  return out;
}

// cuStreamQuery of a stream in its own context (a sticky error it finds is that context's); of a whole_context
// view, of its context's NULL stream.
CUresult query_stream(const StreamView& s) {
  const Driver& d = driver();
  StreamState* st = s.whole_context ? nullptr : stream_state(s.slot);
  const auto handle = st ? reinterpret_cast<CUstream>(st->last_handle.load()) : CU_STREAM_LEGACY;
  const auto ctx = st ? reinterpret_cast<CUcontext>(st->last_ctx.load()) : reinterpret_cast<CUcontext>(s.ctx);
  if (d.CtxSetCurrent) {
    // A driver may refuse to make a faulted context current and answer its sticky error (the sim does): that is
    // the fault itself, though not proven to be this context's (the one current before may have answered), so no
    // context hint. Any other refusal leaves another context current: a NULL, legacy or per-thread handle would be
    // that context's stream, so it is not queried (the answer says so; a torn-down driver's answer reads as one).
    CUresult set = d.CtxSetCurrent(ctx);
    if (is_sticky_fault(set)) return set;
    if (set != CUDA_SUCCESS && context_relative_stream(handle)) return set;
  }
  CUresult r = d.StreamQuery ? d.StreamQuery(handle) : CUDA_SUCCESS;
  if (is_sticky_fault(r)) set_fault_context_hint(s.ctx);  // that stream's context answered the error
  return r;
}

// One probe of the streams that may still hold a fault (exit_probe.h), waited for up to CDSA_EXIT_PROBE_MS.
ExitProbeResult probe_streams() {
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  const bool unseen = work_unseen();
  std::vector<StreamView> contexts;
  if (unseen) contexts = context_views(stream_views());
  return poll_streams_at_exit(
      [&contexts] {
        std::vector<StreamView> v = stream_views();
        v.insert(v.end(), contexts.begin(), contexts.end());
        return v;
      },
      query_stream,
      [&start] {
        timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        return (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
      },
      [] { usleep(200); }, config().exit_probe_ms, unseen);
}

}  // namespace

// At exit: poll the streams whose marks have not all landed, for up to CDSA_EXIT_PROBE_MS, and report a sticky
// fault that no call of the program surfaced. Then write the CDSA_TRACE=always (or profile) file.
void exit_probe() {
  if (getpid() != g_pid || !driver_ready()) return;  // a forked child: not our CUDA state
  InCdsa guard;
  python_bridge_at_exit();  // a report the kernel's Python was to print but never did
  const Config& c = config();
  if (!g_reported.load()) {
    // The marks still deferred (each stream's last launch, shim/record/breadcrumbs.h) go out first, so that a
    // finished stream reads as finished. The probe's own driver calls are the first to meet a fault no call
    // surfaced, so the driver prints the device's assert text in one of them: captured as in a wrapped call (the
    // stdio hooks copy it, the program's stderr still gets it) and kept for the report.
    std::optional<DriverCallScope> printing(std::in_place);
    flush_all_breadcrumbs(guard);
    // The driver torn down before this probe (cudart's own exit handlers ran first) answers 4, 201 or 709, none
    // sticky; the breadcrumb slots are plain host memory and still say which launch never finished.
    ExitProbeResult probe = probe_streams();
    printing.reset();  // what the calls printed is kept (keep_device_text) before the report reads it
    if (probe.verdict == ExitProbeVerdict::StickyFault) {
      on_sticky_fault(probe.result, "exit probe (cuStreamQuery at process exit)");
      return;
    }
    if (probe.verdict == ExitProbeVerdict::TornDown) {
      on_sticky_fault(probe.result,
                      "exit probe (the driver was torn down before cdsa's exit probe ran; the "
                      "breadcrumbs show a launch that never finished)");
      return;
    }
  }
  if (!g_reported.load() && (c.trace == TraceMode::Always || (c.profile && c.trace != TraceMode::Off))) {
    FaultSnapshot snapshot = take_fault_snapshot(guard);
    ReportBuilder build(guard, snapshot);
    report::TraceData t = build.trace(g_start_unix_ns);
    t.reason = std::string(report::trace_enum::Reason::exit);
    std::string written;
    write_trace(t, &written);
  }
}

}  // namespace cdsa::fault_internal

namespace cdsa {

void probe_before_teardown(const char* call) noexcept {
  using namespace fault_internal;
  if (getpid() != g_pid || !driver_ready() || g_reported.load()) return;
  const Driver& d = driver();
  CUcontext current = nullptr;
  if (!d.CtxGetCurrent || !d.CtxSetCurrent) return;
  if (CUresult got = d.CtxGetCurrent(&current); got != CUDA_SUCCESS) {
    // A driver may answer the current context's sticky error here (the sim does): that is the fault itself, with
    // its own code, and the last chance to see it before the teardown leaves only "torn down" to the exit probe.
    // Which context answered is not known (the call failed), so no context hint; and the streams are not queried,
    // as the program's current context could not be put back after them.
    if (is_sticky_fault(got)) on_sticky_fault(got, call);
    return;
  }
  ExitProbeResult probe;
  {
    InCdsa guard;
    // Waited for as at exit (at most CDSA_EXIT_PROBE_MS): the teardown waits for the context's work anyway.
    probe = probe_streams();
    d.CtxSetCurrent(current);  // the queries ran in each stream's context: the program's own is current again
  }
  if (probe.verdict == ExitProbeVerdict::StickyFault) on_sticky_fault(probe.result, call);
}

}  // namespace cdsa
