// The fault path, top to bottom: the once-only gate, then snapshot -> attribute -> build the report -> print it
// and write the trace file. Also the exit probe (a fault that no call surfaced) and the CDSA_TRACE=always file.
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
#include "shim/record/assert_capture.h"
#include "shim/fault/attribution.h"
#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/fault/exit_probe.h"
#include "shim/fault/fault_snapshot.h"
#include "shim/common/log.h"
#include "shim/record/recorder.h"
#include "shim/common/reentrancy.h"
#include "shim/fault/fault_signals.h"
#include "shim/fault/python_bridge.h"
#include "shim/record/breadcrumbs.h"
#include "shim/fault/process_facts.h"
#include "shim/fault/report_builder.h"

namespace cdsa {
namespace {

std::atomic<bool> g_reported{false};        // the once-only gate: a report has begun
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
int g_pid = 0;
uint64_t g_start_unix_ns = 0;

uint64_t wall_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void write_trace(report::TraceData& t, std::string* written) {
  written->clear();
  if (g_trace_dir_unusable) return;
  std::string path = trace_path_for_process(g_start_unix_ns);
  std::string error;
  // A file-size limit (or a full quota) makes the write raise SIGXFSZ, whose default action ends the program:
  // blocked for the write, and taken back unless one was pending already.
  sigset_t xfsz, old_mask, pending;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  sigemptyset(&pending);
  pthread_sigmask(SIG_BLOCK, &xfsz, &old_mask);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGXFSZ) == 1;
  bool ok = report::write_trace_file(path, report::trace_to_json(t), written, &error);
  sigemptyset(&pending);
  sigpending(&pending);
  if (!was_pending && sigismember(&pending, SIGXFSZ) == 1) {
    timespec zero{0, 0};
    sigtimedwait(&xfsz, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (!ok) {
    log_line("trace file not written: %s", error.c_str());
    written->clear();
  }
}

// At exit: poll the streams whose marks have not all landed, for up to CDSA_EXIT_PROBE_MS, and report a sticky
// fault that no call of the program surfaced. Then write the CDSA_TRACE=always (or profile) file.
void exit_probe() {
  if (getpid() != g_pid || !driver_ready()) return;  // a forked child: not our CUDA state
  InCdsa guard;
  python_bridge_at_exit();  // a report the kernel's Python was to print but never did
  const Config& c = config();
  if (!g_reported.load()) {
    const Driver& d = driver();
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    // The marks still deferred (each stream's last launch, shim/record/breadcrumbs.h) go out first, so that a
    // finished stream reads as finished.
    flush_all_breadcrumbs(guard);
    // The driver torn down before this probe (cudart's own exit handlers ran first) answers 4, 201 or 709, none
    // sticky; the breadcrumb slots are plain host memory and still say which launch never finished.
    ExitProbeResult probe = poll_streams_at_exit(
        [] { return stream_views(); },
        [&d](const StreamView& s) {
          // The query runs in the stream's context: a sticky error it finds is that context's.
          StreamState* st = stream_state(s.slot);
          if (d.CtxSetCurrent) d.CtxSetCurrent(reinterpret_cast<CUcontext>(st->last_ctx.load()));
          return d.StreamQuery ? d.StreamQuery(reinterpret_cast<CUstream>(st->last_handle.load())) : CUDA_SUCCESS;
        },
        [&start] {
          timespec now;
          clock_gettime(CLOCK_MONOTONIC, &now);
          return (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        },
        [] { usleep(200); }, c.exit_probe_ms);
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
    t.reason = "exit";
    std::string written;
    write_trace(t, &written);
  }
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

// The report's text so far, ready for a signal handler to print (shim/fault/fault_signals.h), without its
// closing rule: the handler adds its own line and the rule.
void prepare(const report::FaultReport& rep, bool verdict_known) {
  if (config().quiet) return;
  std::string text;
  if (verdict_known) {
    report::TextOptions opt;
    opt.native_all = config().native_all;
    text = report::format_report_text(rep, opt);
  } else {
    report::FaultReport head = rep;  // the error and where it surfaced: the first lines of the report
    text = report::format_report_text(head, {});
    text.resize(text.find("cdsa: surfaced at"));
    text += "cdsa: surfaced at " + rep.surfaced_call + " (thread " + std::to_string(rep.surfaced_tid) + ")\n";
  }
  size_t rule = text.rfind("\n=");
  if (verdict_known && rule != std::string::npos) text.resize(rule + 1);
  prepare_fault_text(text);
}

}  // namespace

namespace {
thread_local uintptr_t tl_fault_ctx_hint = 0;

// The context whose sticky error this is: the stream's the surfacing call named, else the thread's current one.
uintptr_t faulting_context() {
  uintptr_t hint = tl_fault_ctx_hint;
  tl_fault_ctx_hint = 0;
  if (hint) return hint;
  CUcontext ctx = nullptr;
  const Driver& d = driver();
  if (d.CtxGetCurrent && d.CtxGetCurrent(&ctx) == CUDA_SUCCESS) return reinterpret_cast<uintptr_t>(ctx);
  return 0;
}
}  // namespace

// A dead context may refuse even cuCtxGetCurrent: then the context of this thread's latest launch.
static uintptr_t last_launch_context(const FaultSnapshot& s, uint32_t tid) {
  for (size_t i = s.ring.size(); i-- > 0;) {
    if (s.ring[i].tid != tid || (s.ring[i].flags & kFlagCaptured)) continue;
    for (const auto& v : s.streams)
      if (v.id == s.ring[i].stream_id) return v.ctx;
    return 0;
  }
  return 0;
}

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
  atexit(exit_probe);
  python_bridge_start();  // the traceback note and notebook cells, when the process runs CPython
}

void on_sticky_fault(CUresult code, const char* surfaced_call) noexcept {
  if (g_reported.exchange(true)) return wait_for_report();
  g_report_pid.store(getpid(), std::memory_order_release);
  InCdsa guard;
  const Driver& d = driver();
  const uintptr_t fault_ctx = faulting_context();
  report::FaultReport rep;
  rep.code = static_cast<int>(code);
  const char* s = nullptr;
  if (d.GetErrorName && d.GetErrorName(code, &s) == CUDA_SUCCESS && s) rep.error_name = s;
  s = nullptr;
  if (d.GetErrorString && d.GetErrorString(code, &s) == CUDA_SUCCESS && s) rep.error_string = s;
  rep.surfaced_call = surfaced_call;
  rep.surfaced_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  rep.launches_recorded = launches_recorded();
  rep.fault_time_unix_ns = wall_ns();
  uint32_t here = capture_and_intern_stack();
  // From here on a signal that ends the process prints what is known (first: the error and where it surfaced).
  prepare(rep, false);
  arm_fault_signals();

  // A launch another thread handed to the driver but has not recorded yet may be the failing one (the kernel
  // ran and faulted before its launch call returned): wait, bounded, for those to be recorded. The count is
  // taken before the snapshot: a launch it misses was recorded already or submitted after this thread saw the
  // fault, so it cannot be the failing one. This thread is never counted: it may be inside a launch itself.
  auto start = std::chrono::steady_clock::now();
  int in_flight = wait_for_launches_in_flight(start + kInFlightWait);
  // 710: the driver prints the device's assert text on whichever thread's call flushes it, maybe not this one.
  // Without it yet, wait (only while another thread is inside a driver call) for a concurrent call's print.
  if (code == CUDA_ERROR_ASSERT && !base::holds_device_assert(captured_driver_stderr()))
    wait_for_device_text(start + kDeviceTextWait);
  if (in_flight > 0) in_flight = other_threads_launches_in_flight();  // the text wait may have let them finish

  FaultSnapshot snapshot = take_fault_snapshot(guard, here, static_cast<uint32_t>(in_flight));
  seal_ring();  // the snapshot is taken: later launches cannot change the report, so they are not recorded
  snapshot.fault_ctx = fault_ctx ? fault_ctx : last_launch_context(snapshot, rep.surfaced_tid);
  AttributionResult attribution = attribute(snapshot);
  {
    // The verdict, rendered before the slow part (symbolizing native frames, the trace file): Python frames and
    // native frames as module+offset.
    report::FaultReport early = rep;
    ReportBuilder quick(guard, snapshot, ReportBuilder::Native::Unsymbolized);
    early.surfaced_stack_id = quick.surfaced_stack_id();
    early.surfaced_stack = quick.surfaced_stack();
    quick.add_attribution(attribution, &early);
    quick.add_origin(early.candidates.empty() ? 0 : early.candidates.front().launch.ctx_id, &early);
    quick.annotate(&early);
    prepare(early, true);
  }
  ReportBuilder build(guard, snapshot);
  rep.surfaced_stack_id = build.surfaced_stack_id();
  rep.surfaced_stack = build.surfaced_stack();
  build.add_attribution(attribution, &rep);
  build.add_origin(rep.candidates.empty() ? 0 : rep.candidates.front().launch.ctx_id, &rep);
  build.annotate(&rep);

  if (config().trace != TraceMode::Off) {
    report::TraceData t = build.trace(g_start_unix_ns);
    t.reason = "fault";
    t.has_fault = true;
    t.report = rep;  // trace_path stays empty in the file: `cdsa report FILE` knows where it is
    std::string written;
    write_trace(t, &written);
    rep.trace_path = written;
  }
  std::string text;
  if (!config().quiet) {
    report::TextOptions opt;
    opt.native_all = config().native_all;
    text = report::format_report_text(rep, opt);
  }
  // In a Jupyter kernel the program's Python prints it (through the kernel's sys.stderr: the cell's output).
  bool by_python = python_bridge_fault(report::report_to_json(rep), text, report::traceback_note(rep),
                                       report::prior_fault_note(rep), report::restart_pointer(rep));
  if (!text.empty() && !by_python) {
    begin_full_report_output();  // after a signal handler's prepared text, if one printed it
    // stderr closed, or a pipe nobody reads: given up after kStderrWaitMs; the trace file holds the report.
    write_stderr_bounded(text.data(), text.size(), kStderrWaitMs);
  }
  fault_report_finished();
  g_report_out.store(true, std::memory_order_release);
}

}  // namespace cdsa
