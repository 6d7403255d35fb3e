// The fault path, top to bottom: the once-only gate, the waits for the evidence, the snapshot, the seal, the
// attribution, the report prepared for a signal, then the full report printed and the trace file written.
// The exit probe (a fault that no call surfaced, and the CDSA_TRACE=always file) is exit_probe.cc.
#include "shim/common/thread_slots.h"
#include "shim/fault/fault.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "base/device_assert.h"
#include "base/path.h"
#include "report/fault_report.h"
#include "report/note_text.h"
#include "report/trace.h"
#include "report/trace_enums.h"
#include "shim/common/blocked_signal.h"
#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/common/log.h"
#include "shim/common/reentrancy.h"
#include "shim/fault/attribution.h"
#include "shim/fault/fault_internal.h"
#include "shim/fault/fault_signals.h"
#include "shim/fault/fault_snapshot.h"
#include "shim/fault/process_facts.h"
#include "shim/fault/python_bridge.h"
#include "shim/fault/report_builder.h"
#include "shim/record/assert_capture.h"
#include "shim/record/recorder.h"

namespace cdsa {

namespace fault_internal {
std::atomic<bool> g_reported{false};
int g_pid = 0;
uint64_t g_start_unix_ns = 0;
}  // namespace fault_internal

namespace {

using namespace fault_internal;

// How long a report waits for other threads' launches in flight, then (710 without text) for the device's
// assert text a concurrent driver call is printing. Both waits end as soon as there is nothing to wait for.
constexpr auto kInFlightWait = std::chrono::milliseconds(200);
constexpr auto kDeviceTextWait = std::chrono::milliseconds(300);
// Report first, then the program: a thread whose call returns the sticky error while another thread builds the
// report waits this long at most for it (a few seconds: a report takes milliseconds to a second or two).
constexpr auto kReportWait = std::chrono::seconds(4);
// How long the report's write may wait for a stderr that takes no bytes (a pipe nobody reads) before the trace
// file alone holds it.
constexpr int kStderrWaitMs = 2000;
std::atomic<bool> g_report_out{false};  // the report is printed and the trace written (or given up)
std::atomic<int> g_report_pid{0};       // the process whose thread builds it (a forked child never waits)
bool g_trace_dir_unusable = false;  // already said so at start: do not try, do not say it twice

uint64_t wall_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Another thread builds the report: wait for it, bounded, having first given up this thread's own marks (inside a
// driver call, a launch in flight) so that the report never waits for this thread in turn.
void wait_for_report() {
  if (g_report_out.load(std::memory_order_acquire)) return;
  int pid = g_report_pid.load(std::memory_order_acquire);
  if (pid != 0 && pid != getpid()) return;  // a forked child: the report belongs to the parent
  CallMarksReleased released;
  auto deadline = std::chrono::steady_clock::now() + kReportWait;
  for (int round = 0; !g_report_out.load(std::memory_order_acquire); ++round) {
    if (std::chrono::steady_clock::now() >= deadline) return;
    if (round % 10 == 0) recheck_fault_signals();  // a handler the program installed since: cdsa's goes first
    timespec ts{0, 1000000};  // 1 ms
    nanosleep(&ts, nullptr);
  }
}

// The fault's facts as it surfaces (the report's head): the code, its names, the call and thread, the time, the
// launches so far.
FaultFacts fault_facts(CUresult code, const char* surfaced_call) {
  const Driver& d = driver();
  FaultFacts f;
  f.code = static_cast<int>(code);
  const char* s = nullptr;
  if (d.GetErrorName && d.GetErrorName(code, &s) == CUDA_SUCCESS && s) f.error_name = s;
  s = nullptr;
  if (d.GetErrorString && d.GetErrorString(code, &s) == CUDA_SUCCESS && s) f.error_string = s;
  f.surfaced_call = surfaced_call;
  f.surfaced_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  f.launches_recorded = launches_recorded();
  f.fault_time_unix_ns = wall_ns();
  return f;
}

// What a signal handler prints if the process ends before the full report is out (shim/fault/fault_signals.h):
// first the head (the error and where it surfaced), then the verdict without the closing rule (the handler adds
// its own line and the rule).
void prepare_head(const FaultFacts& f) {
  if (config().quiet) return;
  prepare_fault_text(report::format_report_head(f));
}

void prepare_verdict(const report::FaultReport& rep) {
  if (config().quiet) return;
  report::TextOptions opt;
  opt.native_all = config().native_all;
  opt.closing_rule = false;
  prepare_fault_text(report::format_report_text(rep, opt));
}

// A launch another thread handed to the driver but has not recorded yet may be the failing one (the kernel ran and
// faulted before its launch call returned): waits, bounded, for those to be recorded. The count is taken before the
// snapshot: a launch it misses was recorded already or submitted after this thread saw the fault, so it cannot be
// the failing one. This thread is never counted: it may be inside a launch itself. 710: the driver prints the
// device's assert text on whichever thread's call flushes it, maybe not this one; without it yet, waits (only while
// another thread is inside a driver call) for a concurrent call's print. Returns the launches still in flight.
uint32_t wait_for_evidence(CUresult code) {
  auto start = std::chrono::steady_clock::now();
  int in_flight = wait_for_launches_in_flight(start + kInFlightWait);
  if (code == CUDA_ERROR_ASSERT && !base::holds_device_assert(captured_driver_stderr()))
    wait_for_device_text(start + kDeviceTextWait);
  if (in_flight > 0) in_flight = other_threads_launches_in_flight();  // the text wait may have let them finish
  return static_cast<uint32_t>(in_flight);
}

thread_local uintptr_t tl_fault_ctx_hint = 0;

// The context the surfacing call named (its stream's, or the context it synchronized) and that answered the sticky
// error: 0 when the call named none (cuEventSynchronize, cuMemcpy...). Never the thread's current context: the
// error may be another context's, surfacing through its event.
uintptr_t surfaced_context() {
  uintptr_t hint = tl_fault_ctx_hint;
  tl_fault_ctx_hint = 0;
  return hint;
}

// What one stream's context says after the fault (judge_contexts, shim/fault/attribution.h): cuStreamQuery surfaces
// the sticky error of the stream's context ("may also return error codes from previous, asynchronous launches",
// cuda.h), so CUDA_SUCCESS or CUDA_ERROR_NOT_READY proves that context holds none, as long as the handle still names
// a stream of that context: cuStreamGetCtx must say so (a destroyed stream's handle may be another's now). The NULL,
// legacy and per-thread streams are the current context's, so they are asked only when it is the stream's.
ContextAnswer ask_stream_context(const StreamView& v) {
  const Driver& d = driver();
  StreamState* st = stream_state(v.slot);
  if (!st || !v.ctx || !d.StreamQuery) return ContextAnswer::Unknown;
  auto h = reinterpret_cast<CUstream>(st->last_handle.load(std::memory_order_relaxed));
  const bool by_ctx = context_relative_stream(h);
  if (by_ctx) {
    CUcontext here = nullptr;
    if (!d.CtxGetCurrent || d.CtxGetCurrent(&here) != CUDA_SUCCESS || reinterpret_cast<uintptr_t>(here) != v.ctx)
      return ContextAnswer::Unknown;
  }
  const CUresult r = d.StreamQuery(h);
  if (is_sticky_fault(r)) return ContextAnswer::Faulted;
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) return ContextAnswer::Unknown;
  if (!by_ctx) {
    CUcontext owner = nullptr;
    if (!d.StreamGetCtx || d.StreamGetCtx(h, &owner) != CUDA_SUCCESS || reinterpret_cast<uintptr_t>(owner) != v.ctx)
      return ContextAnswer::Unknown;
  }
  return ContextAnswer::Healthy;
}

// The contexts proven free of the sticky error, and the one proven to hold it (with the id its records carry).
void judge_fault_contexts(uintptr_t surfaced_ctx, FaultSnapshot* s) {
  ContextJudgement j = judge_contexts(s->streams, surfaced_ctx, ask_stream_context);
  s->healthy_ctx = std::move(j.healthy);
  if (j.faulted.size() != 1) return;
  s->fault_ctx = j.faulted.front();
  for (const auto& v : s->streams) {
    if (v.ctx != s->fault_ctx) continue;
    for (const auto& r : s->ring)
      if (r.stream_id == v.id && r.ctx_id != 0 && !(r.flags & kFlagCaptured)) {
        s->fault_ctx_id = r.ctx_id;
        return;
      }
  }
}

// The trace file with the report (trace_path stays empty in the file: `cdsa report FILE` knows where it is); its
// path goes into the report.
// The trace file the report names, before it is written (trace_path_for_process; the writer takes path-N where
// that name is taken): "" when no trace is written.
std::string planned_trace_path() {
  if (config().trace == TraceMode::Off || g_trace_dir_unusable) return {};
  return trace_path_for_process(g_start_unix_ns);
}

// The trace's contents, built (in memory: no file system is touched) before the report is printed.
report::TraceData fault_trace(ReportBuilder& build, const report::FaultReport& rep) {
  report::TraceData t = build.trace(g_start_unix_ns);
  t.reason = std::string(report::trace_enum::Reason::fault);
  t.has_fault = true;
  t.report = rep;
  t.report.trace_path.clear();  // the file does not name itself: `cdsa report FILE` knows where it is
  return t;
}

// After the report is out: the trace file it named (`planned`). A write that fails, or a name that was taken, is said
// in a line of its own (the report said only "trace file X", never "written").
void write_fault_trace(report::TraceData& t, const std::string& planned) {
  if (planned.empty()) return;
  std::string written;
  write_trace(t, &written);  // says why, where it fails
  if (!written.empty() && written != planned)
    log_line("trace file %s was taken: the trace is %s", planned.c_str(), written.c_str());
}

// The report on stderr; in a Jupyter kernel the program's Python prints it (through the kernel's sys.stderr: the
// cell's output).
void print_report(const report::FaultReport& rep) {
  std::string text;
  if (!config().quiet) {
    report::TextOptions opt;
    opt.native_all = config().native_all;
    text = report::format_report_text(rep, opt);
  }
  bool by_python = python_bridge_fault(report::report_to_json(rep), text, report::traceback_note(rep),
                                       report::prior_fault_note(rep), report::restart_pointer(rep));
  if (!text.empty() && !by_python) {
    begin_full_report_output();  // after a signal handler's prepared text, if one printed it
    // stderr closed, or a pipe nobody reads: given up after kStderrWaitMs; the trace file holds the report.
    write_stderr_bounded(text.data(), text.size(), kStderrWaitMs);
  }
}

}  // namespace

namespace fault_internal {
void write_trace(report::TraceData& t, std::string* written) {
  written->clear();
  if (g_trace_dir_unusable) return;
  std::string path = trace_path_for_process(g_start_unix_ns);
  std::string error;
  bool ok;
  {
    // A file-size limit (or a full quota) makes the write raise SIGXFSZ, whose default action ends the program.
    BlockedSignal xfsz(SIGXFSZ);
    ok = report::write_trace_file(path, report::trace_to_json(t), written, &error);
    if (xfsz.pending_now()) xfsz.take_back();
  }
  if (!ok) {
    log_line("trace file %s not written: %s", path.c_str(), error.c_str());
    written->clear();
  }
}
}  // namespace fault_internal

void set_fault_context_hint(uintptr_t ctx) noexcept { tl_fault_ctx_hint = ctx; }

void fault_handling_init() noexcept {
  g_pid = getpid();
  g_start_unix_ns = wall_ns();
  const Config& c = config();
  if (c.trace != TraceMode::Off) {
    // Say now, not at the fault, when the trace file could not be created where asked.
    std::string path = trace_path_for_process(g_start_unix_ns);
    std::string dir = base::dirname_of(path);
    struct stat sb;
    errno = 0;
    if (stat(dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir.c_str(), W_OK | X_OK) != 0) {
      g_trace_dir_unusable = true;
      log_line("CDSA_TRACE_FILE=%s: directory %s is not writable (%s); a trace file will not be written there",
               c.trace_pattern, dir.c_str(), errno ? strerror(errno) : "not a directory");
    }
  }
  atexit(exit_probe);  // exit_probe.cc
  python_bridge_start();  // the traceback note and notebook cells, when the process runs CPython
}

void on_sticky_fault(CUresult code, const char* surfaced_call) noexcept {
  if (g_reported.exchange(true)) return wait_for_report();
  g_report_pid.store(getpid(), std::memory_order_release);
  InCdsa guard;
  const uintptr_t fault_ctx = surfaced_context();
  const FaultFacts facts = fault_facts(code, surfaced_call);
  const uint32_t here = capture_and_intern_stack();
  // From here on a signal that ends the process prints what is known (first: the error and where it surfaced).
  prepare_head(facts);
  arm_fault_signals();
  const uint32_t in_flight = wait_for_evidence(code);
  FaultSnapshot snapshot = take_fault_snapshot(guard, facts, here, in_flight);
  seal_ring();  // the snapshot is taken: later launches cannot change the report, so they are not recorded
  judge_fault_contexts(fault_ctx, &snapshot);  // asks the driver: after the seal, before the verdict
  const AttributionResult attribution = attribute(snapshot);
  // The verdict, rendered before the slow part (symbolizing native frames, the trace file): Python frames and
  // native frames as module+offset.
  prepare_verdict(ReportBuilder(guard, snapshot, ReportBuilder::Native::Unsymbolized).report(attribution));
  ReportBuilder build(guard, snapshot);
  report::FaultReport rep = build.report(attribution);
  // The report before the trace file: a file system that stalls (a hung network mount) cannot hold the report back.
  // The trace's contents are built first (memory only), the file written after the report.
  const std::string trace = planned_trace_path();
  rep.trace_path = trace;
  report::TraceData t;
  if (!trace.empty()) t = fault_trace(build, rep);
  print_report(rep);
  write_fault_trace(t, trace);
  fault_report_finished();
  g_report_out.store(true, std::memory_order_release);
}

}  // namespace cdsa
