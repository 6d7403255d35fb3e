#include "shim/launch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <sys/syscall.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "cupti_tracer/backend.h"
#include "shim/assert_capture.h"
#include "shim/breadcrumbs.h"
#include "shim/config.h"
#include "shim/driver.h"
#include "shim/fault.h"
#include "shim/log.h"
#include "shim/profile.h"

namespace cdsa {
namespace {

// Launch-path thread state: initial-exec TLS (a few hundred bytes; no __tls_get_addr on the hot path).
[[gnu::tls_model("initial-exec")]] thread_local int tl_in_cdsa = 0;
[[gnu::tls_model("initial-exec")]] thread_local uint32_t tl_tid = 0;
[[gnu::tls_model("initial-exec")]] thread_local CUcontext tl_last_ctx = nullptr;

std::once_flag g_start_once;
std::atomic<bool> g_started{false};
std::atomic<uint64_t> g_stream_gen{1};  // bumped when a stream is destroyed: handle caches go stale
std::atomic<int> g_captures_active{0};

uint32_t this_tid() {
  if (!tl_tid) tl_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return tl_tid;
}

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Per-thread cache: (stream handle, context) -> stream id, table slot, context id.
struct StreamCacheEntry {
  uintptr_t handle = 0, ctx = 0;
  uint64_t gen = 0, id = 0;
  int slot = -1;
  uint32_t ctx_id = 0;
};
constexpr int kStreamCache = 4;  // small: initial-exec TLS is scarce for a dlopen'ed library
[[gnu::tls_model("initial-exec")]] thread_local StreamCacheEntry tl_streams[kStreamCache];
[[gnu::tls_model("initial-exec")]] thread_local int tl_stream_next = 0;

const StreamCacheEntry* resolve_stream(CUstream s, CUcontext ctx) {
  uint64_t gen = g_stream_gen.load(std::memory_order_acquire);
  auto h = reinterpret_cast<uintptr_t>(s), c = reinterpret_cast<uintptr_t>(ctx);
  for (auto& e : tl_streams)
    if (e.gen == gen && e.handle == h && e.ctx == c) return &e;
  const Driver& d = driver();
  unsigned long long id = 0, cid = 0;
  if (!d.StreamGetId || d.StreamGetId(s, &id) != CUDA_SUCCESS) {
    // The driver cannot name the stream (typically: the context died during this very launch). Key it by
    // handle, in a range the driver's ids do not use, so the launch still gets a stream and a slot.
    id = (1ull << 63) | reinterpret_cast<uintptr_t>(s);
  }
  if (d.CtxGetId && ctx) d.CtxGetId(ctx, &cid);
  StreamCacheEntry& e = tl_streams[tl_stream_next];
  tl_stream_next = (tl_stream_next + 1) % kStreamCache;
  e = StreamCacheEntry{h, c, gen, id, stream_slot(id), static_cast<uint32_t>(cid)};
  return &e;
}

// ---- graph capture bookkeeping (setup-time work: a mutex is fine here) ----
std::mutex g_capture_mutex;
uint32_t g_next_capture = 0;
std::map<uint64_t, uint32_t>* g_capture_by_stream = nullptr;    // stream id -> capture id
std::unordered_map<uintptr_t, uint32_t>* g_capture_by_graph = nullptr;
std::vector<LaunchRecord>* g_capture_nodes = nullptr;            // every captured launch, bounded
constexpr size_t kMaxCaptureNodes = 1 << 16;

uint64_t stream_id_of(CUstream s) {
  unsigned long long id = 0;
  if (driver().StreamGetId) driver().StreamGetId(s, &id);
  return id;
}

CUstream effective_stream(CUstream s, bool per_thread) {
  return (s == nullptr && per_thread) ? CU_STREAM_PER_THREAD : s;
}

void start(const void* hint) {
  report_config_problems_once();  // the process uses CUDA: now its CDSA_* problems matter
  if (!config().enabled) return;
  driver_init(hint);
  if (!driver_ready() || !recorder_init()) return;
  g_capture_by_stream = new std::map<uint64_t, uint32_t>;
  g_capture_by_graph = new std::unordered_map<uintptr_t, uint32_t>;
  g_capture_nodes = new std::vector<LaunchRecord>;
  fault_handling_init();
  g_started.store(true, std::memory_order_release);
  cupti_backend_start();  // no-op unless CDSA_BACKEND=cupti (or CUDA_INJECTION64_PATH loaded cdsa)
}

}  // namespace

InCdsa::InCdsa() noexcept { ++tl_in_cdsa; }
InCdsa::~InCdsa() { --tl_in_cdsa; }
bool InCdsa::active() noexcept { return tl_in_cdsa > 0; }

bool ensure_started(const void* hint) noexcept {
  if (g_started.load(std::memory_order_acquire)) return true;
  if (!config().enabled) return false;
  std::call_once(g_start_once, [hint] { start(hint); });
  return g_started.load(std::memory_order_acquire);
}

namespace {
uint32_t kernel_name_of(CUfunction func) {
  if (!func) return kNoString;
  auto key = reinterpret_cast<uintptr_t>(func);
  uint32_t name = handle_map_get(HandleMap::KernelName, key);
  const Driver& d = driver();
  if (name == kNoString && d.FuncGetName) {
    const char* s = nullptr;
    if (d.FuncGetName(&s, func) == CUDA_SUCCESS && s) {
      name = intern_string(s, strlen(s));
      handle_map_put(HandleMap::KernelName, key, name);
    }
  }
  return name;
}
}  // namespace

void prepare_launch(CUfunction func) noexcept {
  if (!g_started.load(std::memory_order_acquire) || InCdsa::active()) return;
  InCdsa guard;
  if (!breadcrumbs_active()) breadcrumbs_init();
  kernel_name_of(func);
}

void record_launch(const LaunchInfo& info, LaunchSource source) noexcept {
  if (!g_started.load(std::memory_order_acquire) || InCdsa::active() || fault_reported()) return;
  if (source == LaunchSource::Interposer && cupti_backend_recorded(info)) return;  // CUPTI recorded it
  InCdsa guard;
  const Driver& d = driver();
  CUstream eff = effective_stream(info.stream, info.per_thread);
  // After a fault the driver may refuse even this: then the thread's last known context is the best answer.
  CUcontext ctx = nullptr;
  if (d.CtxGetCurrent && d.CtxGetCurrent(&ctx) == CUDA_SUCCESS) tl_last_ctx = ctx;
  else ctx = tl_last_ctx;
  const StreamCacheEntry* sc = resolve_stream(eff, ctx);

  LaunchRecord r;
  r.seq = next_launch_seq();
  r.kind = info.kind;
  r.stream_id = sc ? sc->id : 0;
  r.ctx_id = sc ? sc->ctx_id : 0;
  r.stream_slot = sc && sc->slot >= 0 ? static_cast<uint32_t>(sc->slot) : 0xffffffffu;
  r.tid = this_tid();
  r.time_ns = now_ns();
  for (int i = 0; i < 3; ++i) {
    r.grid[i] = info.grid[i];
    r.block[i] = info.block[i];
  }
  r.shared_mem = info.shared_mem;
  if (info.per_thread && info.stream == nullptr) r.flags |= kFlagPerThreadStream;
  r.kernel_name = kernel_name_of(info.func);
  r.stack_id = capture_and_intern_stack();

  bool capturing = false;
  if (g_captures_active.load(std::memory_order_acquire) > 0 && d.StreamIsCapturing) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    capturing = d.StreamIsCapturing(eff, &status) == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  if (capturing) {
    // No breadcrumb: a captured write would freeze its value into the graph.
    r.flags |= kFlagCaptured | kFlagNoBreadcrumb;
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    auto it = g_capture_by_stream->find(r.stream_id);
    if (it != g_capture_by_stream->end()) r.graph_id = it->second;
    else if (g_capture_by_stream->size() == 1) r.graph_id = g_capture_by_stream->begin()->second;  // joined stream
    if (g_capture_nodes->size() < kMaxCaptureNodes) g_capture_nodes->push_back(r);
    ring_publish(r);
    return;
  }
  profile_count(r.stack_id, r.kernel_name);  // captured launches do not run: not counted
  if (info.kind == LaunchKind::Graph) {
    uint32_t token = handle_map_get(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(info.graph_exec));
    r.graph_id = token == kNoString ? 0 : token;
  }

  StreamState* st = sc ? stream_state(sc->slot) : nullptr;
  CUresult crumb = CUDA_SUCCESS;
  if (st) {
    r.stream_seq = st->launched.fetch_add(1, std::memory_order_acq_rel) + 1;
    st->last_handle.store(reinterpret_cast<uintptr_t>(eff), std::memory_order_relaxed);
    st->last_ctx.store(reinterpret_cast<uintptr_t>(ctx), std::memory_order_relaxed);
    st->ctx_id.store(r.ctx_id, std::memory_order_relaxed);
    if (info.per_thread && info.stream == nullptr) st->per_thread.store(true, std::memory_order_relaxed);
    if (breadcrumbs_init()) {
      crumb = enqueue_breadcrumb(eff, sc->slot, r.stream_seq);
      // A sticky fault here means the context died before the mark could be queued: no later mark can land
      // either, so the stream's marks stay exact. The driver may have printed the device's assert text into
      // this call; keep it for the report, which the program's next call will trigger.
      if (crumb == CUDA_SUCCESS || is_sticky_fault(crumb))
        st->breadcrumb_launched.store(r.stream_seq, std::memory_order_release);
      if (is_sticky_fault(crumb)) keep_device_text(captured_driver_stderr());
    }
    if (!breadcrumbs_active() || crumb != CUDA_SUCCESS) r.flags |= kFlagNoBreadcrumb;
  } else {
    r.flags |= kFlagNoBreadcrumb;
  }
  ring_publish(r);
}

void note_capture_begin(CUstream stream, bool per_thread) noexcept {
  if (!g_started.load(std::memory_order_acquire)) return;
  InCdsa guard;
  uint64_t id = stream_id_of(effective_stream(stream, per_thread));
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  (*g_capture_by_stream)[id] = ++g_next_capture;
  g_captures_active.fetch_add(1, std::memory_order_acq_rel);
}

void note_capture_end(CUstream stream, bool per_thread, CUgraph graph) noexcept {
  if (!g_started.load(std::memory_order_acquire)) return;
  InCdsa guard;
  uint64_t id = stream_id_of(effective_stream(stream, per_thread));
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  auto it = g_capture_by_stream->find(id);
  if (it == g_capture_by_stream->end()) return;
  if (graph) (*g_capture_by_graph)[reinterpret_cast<uintptr_t>(graph)] = it->second;
  g_capture_by_stream->erase(it);
  g_captures_active.fetch_sub(1, std::memory_order_acq_rel);
}

void note_graph_instantiate(CUgraphExec exec, CUgraph graph) noexcept {
  if (!g_started.load(std::memory_order_acquire) || !exec) return;
  uint32_t token = 0;
  {
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    auto it = g_capture_by_graph->find(reinterpret_cast<uintptr_t>(graph));
    if (it == g_capture_by_graph->end()) return;
    token = it->second;
  }
  handle_map_put(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(exec), token);
}

void note_stream_destroyed() noexcept { g_stream_gen.fetch_add(1, std::memory_order_acq_rel); }

std::vector<LaunchRecord> captured_nodes(uint64_t capture_id) {
  std::vector<LaunchRecord> out;
  if (!g_started.load(std::memory_order_acquire) || capture_id == 0) return out;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  for (const auto& r : *g_capture_nodes)
    if (r.graph_id == capture_id) out.push_back(r);
  return out;
}

}  // namespace cdsa
