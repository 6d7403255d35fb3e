#include "shim/fault.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dlfcn.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <string>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

#include "report/autograd.h"
#include "report/fault_report.h"
#include "report/hints.h"
#include "report/trace.h"
#include "shim/assert_capture.h"
#include "shim/breadcrumbs.h"
#include "shim/config.h"
#include "shim/driver.h"
#include "shim/launch.h"
#include "shim/log.h"
#include "shim/profile.h"
#include "shim/recorder.h"
#include "shim/symbolize.h"

#ifndef CDSA_VERSION
#define CDSA_VERSION "0.0.0"
#endif

namespace cdsa {
namespace {

std::atomic<bool> g_reported{false};
bool g_trace_dir_unusable = false;  // already said so at start: do not try, do not say it twice
int g_pid = 0;
uint64_t g_start_unix_ns = 0;

const char* kind_name(LaunchKind k) {
  switch (k) {
    case LaunchKind::KernelEx: return "kernel_ex";
    case LaunchKind::Cooperative: return "cooperative";
    case LaunchKind::Graph: return "graph";
    default: return "kernel";
  }
}

LaunchText to_text(const LaunchRecord& r) {
  LaunchText l;
  l.seq = r.seq;
  l.stream_seq = r.stream_seq;
  l.stream_id = r.stream_id;
  l.graph_id = r.graph_id;
  l.time_ns = r.time_ns;
  l.ctx_id = r.ctx_id;
  l.tid = r.tid;
  l.stack_id = r.stack_id;
  l.kernel = string_at(r.kernel_name);
  l.kind = kind_name(r.kind);
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = r.grid[i];
    l.block[i] = r.block[i];
  }
  l.shared_mem = r.shared_mem;
  l.captured = r.flags & kFlagCaptured;
  l.per_thread_stream = r.flags & kFlagPerThreadStream;
  return l;
}

// Source lines, read once per file per report.
class SourceLines {
 public:
  std::string line(const std::string& file, int n) {
    if (n <= 0 || file.empty() || file[0] == '<') return {};
    auto it = files_.find(file);
    if (it == files_.end()) {
      std::vector<std::string> lines;
      std::ifstream in(file);
      std::string s;
      while (in && std::getline(in, s) && lines.size() < 200000) lines.push_back(s);
      it = files_.emplace(file, std::move(lines)).first;
    }
    if (static_cast<size_t>(n) > it->second.size()) return {};
    std::string s = it->second[static_cast<size_t>(n) - 1];
    size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  }

 private:
  std::map<std::string, std::vector<std::string>> files_;
};

StackText stack_text(uint32_t id, SourceLines& src, NativeSymbolizer& sym) {
  StackText st;
  Stack s;
  if (!stack_at(id, &s)) return st;
  for (const auto& f : s.python) {
    PyFrameText t;
    t.file = string_at(f.file);
    t.function = string_at(f.function);
    t.line = f.line;
    t.source = src.line(t.file, t.line);
    st.python.push_back(std::move(t));
  }
  st.native = sym.symbolize(s.native);
  return st;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

std::vector<std::string> process_argv() {
  std::vector<std::string> argv;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0')) argv.push_back(arg);
  return argv;
}

int env_int(const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < (1 << 30)) ? static_cast<int>(x) : -1;
}

int process_rank() {
  for (const char* n : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    int r = env_int(n);
    if (r >= 0) return r;
  }
  return -1;
}

ProcessText process_text() {
  ProcessText p;
  p.pid = getpid();
  p.host = hostname();
  p.argv = process_argv();
  p.start_time_unix_ns = g_start_unix_ns;
  p.rank = process_rank();
  p.world_size = env_int("WORLD_SIZE");
  if (p.world_size < 0) p.world_size = env_int("SLURM_NTASKS");
  if (p.world_size < 0) p.world_size = env_int("OMPI_COMM_WORLD_SIZE");
  p.local_rank = env_int("LOCAL_RANK");
  if (p.local_rank < 0) p.local_rank = env_int("SLURM_LOCALID");
  const Driver& d = driver();
  if (d.DriverGetVersion) d.DriverGetVersion(&p.driver_version);
  // A shared cudart (PyTorch's) answers without touching the dead context; a static one is invisible here.
  using RuntimeVersionFn = int (*)(int*);
  if (auto rv = reinterpret_cast<RuntimeVersionFn>(dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion")))
    if (rv(&p.runtime_version) != 0) p.runtime_version = 0;
  CUdevice dev = 0;
  char name[256] = {0};
  if (d.CtxGetDevice && d.DeviceGetName && d.CtxGetDevice(&dev) == CUDA_SUCCESS &&
      d.DeviceGetName(name, sizeof name - 1, dev) == CUDA_SUCCESS)
    p.gpu = name;
  return p;
}

std::vector<std::pair<std::string, std::string>> config_text() { return config_fields(config()); }

struct StreamView {
  int slot;
  uint64_t id, launched, landed;
  bool marks;  // every launch on it got a breadcrumb, so `landed` is meaningful
};

std::vector<StreamView> stream_views() {
  std::vector<StreamView> out;
  for (uint32_t i = 0; i < stream_capacity(); ++i) {
    StreamState* st = stream_state(static_cast<int>(i));
    if (!st) break;
    uint64_t id = st->id.load(std::memory_order_acquire);
    if (id == 0) continue;
    uint64_t launched = st->launched.load(std::memory_order_acquire);
    if (launched == 0) continue;
    bool marks = breadcrumbs_active() && st->breadcrumb_launched.load(std::memory_order_acquire) == launched;
    out.push_back({static_cast<int>(i), id - 1, launched, breadcrumb_landed(static_cast<int>(i)), marks});
  }
  return out;
}

// Names the failing launch: the first launch whose breadcrumb never landed, per stream.
void attribute(FaultReport& rep, const std::vector<LaunchRecord>& ring, const std::vector<StreamView>& streams,
               const std::vector<DeviceAssert>& asserts, SourceLines& src, NativeSymbolizer& sym) {
  struct Pick {
    const LaunchRecord* rec;
    uint64_t pending;
    uint64_t stream_id, stream_seq;
  };
  std::vector<Pick> picks;
  bool unmarked_pending = false;
  for (const auto& s : streams) {
    if (!s.marks) {
      unmarked_pending = true;
      continue;
    }
    if (s.landed >= s.launched) continue;
    uint64_t want = s.landed + 1;
    const LaunchRecord* rec = nullptr;
    for (const auto& r : ring)
      if (r.stream_id == s.id && r.stream_seq == want && !(r.flags & kFlagCaptured)) {
        rec = &r;
        break;
      }
    picks.push_back({rec, s.launched - s.landed, s.id, want});
  }
  std::sort(picks.begin(), picks.end(), [](const Pick& a, const Pick& b) {
    uint64_t sa = a.rec ? a.rec->seq : UINT64_MAX, sb = b.rec ? b.rec->seq : UINT64_MAX;
    return sa < sb;
  });
  if (unmarked_pending)
    rep.notes.push_back("some streams had launches without breadcrumbs; they cannot be ruled out");
  // Several streams pending: the device's assert text names the function that failed.
  std::string named_by_device;
  if (picks.size() > 1 && !asserts.empty()) {
    auto matches = [&](const Pick& p) {
      if (!p.rec) return false;
      std::string kernel = string_at(p.rec->kernel_name);
      for (const auto& a : asserts)
        if (!a.function.empty() && kernel.find(a.function) != std::string::npos) return true;
      return false;
    };
    auto mid = std::stable_partition(picks.begin(), picks.end(), matches);
    if (mid - picks.begin() == 1) {
      named_by_device = asserts.front().function;
      picks.erase(mid, picks.end());
    }
  }
  if (picks.size() == 1 && !unmarked_pending) rep.attribution = Attribution::Exact;
  else if (!picks.empty()) rep.attribution = Attribution::Ambiguous;
  else rep.attribution = Attribution::Unknown;

  for (const auto& p : picks) {
    Candidate c;
    c.pending = p.pending;
    if (p.rec) {
      c.launch = to_text(*p.rec);
      c.stack = stack_text(p.rec->stack_id, src, sym);
    } else {
      c.launch.stream_id = p.stream_id;
      c.launch.stream_seq = p.stream_seq;
      rep.notes.push_back("the record of launch #" + std::to_string(p.stream_seq) + " on stream " +
                          std::to_string(p.stream_id) +
                          " was overwritten (the ring keeps CDSA_RING_SIZE launches; raise it)");
    }
    c.why = "first unfinished launch on stream " + std::to_string(p.stream_id) + "; " + std::to_string(p.pending) +
            " launch" + (p.pending == 1 ? "" : "es") + " on it had not completed";
    if (!named_by_device.empty())
      c.why += "; other streams had unfinished launches too, but only this kernel matches the device's assert in " +
               named_by_device;
    if (p.rec && p.rec->kind == LaunchKind::Graph) {
      for (const auto& node : captured_nodes(p.rec->graph_id)) {
        GraphNodeText g;
        g.launch = to_text(node);
        g.stack = stack_text(node.stack_id, src, sym);
        c.graph_nodes.push_back(std::move(g));
      }
    }
    rep.candidates.push_back(std::move(c));
  }
  if (picks.empty() && !ring.empty()) {
    // Nothing pending that breadcrumbs can see: show the most recent launches as hints.
    size_t shown = 0;
    for (auto it = ring.rbegin(); it != ring.rend() && shown < 3; ++it, ++shown) {
      Candidate c;
      c.launch = to_text(*it);
      c.stack = stack_text(it->stack_id, src, sym);
      c.why = "recent launch (not proven)";
      rep.candidates.push_back(std::move(c));
    }
  }
}

// The autograd node and its forward candidates (report/autograd.h), then the hints (report/hints.h).
void annotate(FaultReport& rep, const std::vector<LaunchRecord>& ring, SourceLines& src, NativeSymbolizer& sym) {
  HintContext ctx;
  for (const auto& r : ring) ctx.launches.push_back(to_text(r));
  ctx.launches_complete = ring.empty() || ring.front().seq == 1;
  ctx.argv = process_argv();
  std::map<uint32_t, StackText> stacks;
  add_autograd_candidates(rep, ctx.launches, [&](uint32_t id) -> const StackText* {
    auto it = stacks.find(id);
    if (it == stacks.end()) it = stacks.emplace(id, stack_text(id, src, sym)).first;
    return &it->second;
  });
  add_hints(rep, ctx);
}

TraceData build_trace(const std::vector<LaunchRecord>& ring, const std::vector<StreamView>& streams, SourceLines& src,
                      NativeSymbolizer& sym) {
  TraceData t;
  t.cdsa_version = CDSA_VERSION;
  t.config = config_text();
  t.process = process_text();
  t.modules = sym.modules();
  std::vector<uint32_t> ids;
  for (const auto& r : ring)
    if (r.stack_id != kUnknownStack) ids.push_back(r.stack_id);
  t.has_profile = profile_snapshot(&t.profile);
  for (const auto& s : t.profile.sites)
    if (s.stack_id != kUnknownStack) ids.push_back(s.stack_id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (uint32_t id : ids) t.stacks.emplace_back(id, stack_text(id, src, sym));
  for (const auto& r : ring) t.launches.push_back(to_text(r));
  for (const auto& s : streams) t.streams.push_back({s.id, s.launched, s.landed, s.marks});
  return t;
}

std::string trace_path_for_process() {
  return expand_trace_pattern(config().trace_pattern, hostname(), getpid(), process_rank(),
                              g_start_unix_ns / 1000000000ull);
}

void write_trace(TraceData& t, std::string* written) {
  written->clear();
  if (g_trace_dir_unusable) return;
  std::string path = trace_path_for_process();
  std::string error;
  if (!write_trace_file(path, trace_to_json(t), written, &error)) {
    log_line("trace file not written: %s", error.c_str());
    written->clear();
  }
}

void exit_probe() {
  if (getpid() != g_pid || !driver_ready()) return;  // a forked child: not our CUDA state
  InCdsa guard;
  const Config& c = config();
  if (!g_reported.load()) {
    const Driver& d = driver();
    timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
      bool pending = false;
      for (const auto& s : stream_views()) {
        if (s.marks && s.landed >= s.launched) continue;
        pending = pending || s.marks;
        StreamState* st = stream_state(s.slot);
        if (d.CtxSetCurrent) d.CtxSetCurrent(reinterpret_cast<CUcontext>(st->last_ctx.load()));
        CUresult r = d.StreamQuery ? d.StreamQuery(reinterpret_cast<CUstream>(st->last_handle.load()))
                                   : CUDA_SUCCESS;
        if (is_sticky_fault(r)) {
          on_sticky_fault(r, "exit probe (cuStreamQuery at process exit)");
          return;
        }
      }
      if (!pending) break;
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
      if (elapsed_ms >= c.exit_probe_ms) break;
      usleep(200);
    }
  }
  if (!g_reported.load() && (c.trace == TraceMode::Always || (c.profile && c.trace != TraceMode::Off))) {
    std::vector<LaunchRecord> ring;
    ring_snapshot(&ring);
    auto streams = stream_views();
    SourceLines src;
    NativeSymbolizer sym;
    TraceData t = build_trace(ring, streams, src, sym);
    t.reason = "exit";
    std::string written;
    write_trace(t, &written);
  }
}

}  // namespace

bool fault_reported() noexcept { return g_reported.load(std::memory_order_acquire); }

void fault_handling_init() noexcept {
  g_pid = getpid();
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  g_start_unix_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  const Config& c = config();
  if (c.trace != TraceMode::Off) {
    // Say now, not at the fault, when the trace file could not be created where asked.
    std::string path = trace_path_for_process();
    auto slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    struct stat sb;
    errno = 0;
    if (stat(dir.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir.c_str(), W_OK | X_OK) != 0) {
      g_trace_dir_unusable = true;
      log_line("CDSA_TRACE_FILE=%s: directory %s is not writable (%s); a trace file will not be written there",
               c.trace_pattern, dir.c_str(), errno ? strerror(errno) : "not a directory");
    }
  }
  atexit(exit_probe);
}

void on_sticky_fault(CUresult code, const char* surfaced_call) noexcept {
  if (g_reported.exchange(true)) return;
  InCdsa guard;
  const Driver& d = driver();
  FaultReport rep;
  rep.code = static_cast<int>(code);
  const char* s = nullptr;
  if (d.GetErrorName && d.GetErrorName(code, &s) == CUDA_SUCCESS && s) rep.error_name = s;
  s = nullptr;
  if (d.GetErrorString && d.GetErrorString(code, &s) == CUDA_SUCCESS && s) rep.error_string = s;
  rep.surfaced_call = surfaced_call;
  rep.surfaced_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  rep.launches_recorded = launches_recorded();
  timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  rep.fault_time_unix_ns = static_cast<uint64_t>(wall.tv_sec) * 1000000000ull + static_cast<uint64_t>(wall.tv_nsec);

  SourceLines src;
  NativeSymbolizer sym;
  uint32_t here = capture_and_intern_stack();
  rep.surfaced_stack = stack_text(here, src, sym);

  std::vector<LaunchRecord> ring;
  ring_snapshot(&ring);
  auto streams = stream_views();
  auto asserts = parse_device_asserts(kept_device_text() + captured_driver_stderr());
  for (const auto& a : asserts) rep.device_messages.push_back(a.message);
  attribute(rep, ring, streams, asserts, src, sym);
  annotate(rep, ring, src, sym);
  if (!breadcrumbs_active()) rep.notes.push_back("breadcrumbs were off: candidates are not proven");
  const char* overflow = recorder_overflow_note();
  if (overflow && *overflow) rep.notes.push_back(overflow);

  if (config().trace != TraceMode::Off) {
    TraceData t = build_trace(ring, streams, src, sym);
    t.reason = "fault";
    t.has_fault = true;
    t.report = rep;  // trace_path stays empty in the file: `cdsa report FILE` knows where it is
    std::string written;
    write_trace(t, &written);
    rep.trace_path = written;
  }
  if (!config().quiet) {
    TextOptions opt;
    opt.native_all = config().native_all;
    std::string text = format_report_text(rep, opt);
    write_stderr(text.data(), text.size());
  }
}

}  // namespace cdsa
