#include "shim/record/launch.h"
#include "shim/record/launch_clock.h"

#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <cstring>
#include <ctime>

#include "shim/record/breadcrumbs.h"
#include "shim/record/device_info.h"
#include "shim/common/driver.h"
#include "shim/record/graph_capture.h"
#include "shim/record/profile.h"
#include "shim/record/stream_order.h"
#include "shim/common/reentrancy.h"
#include "shim/common/started.h"
#include "shim/common/thread_block.h"

namespace cdsa {
namespace {

// Launch-path thread state: initial-exec TLS (a few hundred bytes; no __tls_get_addr on the hot path).
[[gnu::tls_model("initial-exec")]] thread_local uint32_t tl_tid = 0;
[[gnu::tls_model("initial-exec")]] thread_local CUcontext tl_last_ctx = nullptr;

std::atomic<uint64_t> g_stream_gen{1};  // bumped when a stream is destroyed: handle caches go stale
std::atomic<LaunchFilter> g_filter{nullptr};

uint32_t this_tid() {
  if (!tl_tid) tl_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return tl_tid;
}

// Per-thread cache: stream handle (and, for the NULL / legacy / per-thread default streams, the context) -> stream
// id, table slot, context. Sized for real programs (PyTorch with NCCL and side streams uses dozens of streams per
// thread): 64 entries, 4-way set associative, a ThreadBlock (mapped on the thread's first launch, only its
// pointer in initial-exec TLS, which a dlopen'ed library must keep small).
struct StreamCacheEntry {
  uintptr_t handle = 0, ctx = 0;
  uint64_t gen = 0, id = 0;
  int slot = -1;
  uint32_t ctx_id = 0;
  StreamState* state = nullptr;  // stream_state(slot)
};
constexpr int kStreamWays = 4, kStreamSets = 16;
// The kernel-name map's answers this thread had last, direct-mapped by handle: one is used again only while no
// value was stored into the map since it was read (kernel_name_puts(), read before the map was), so it is the
// map's answer now, without its hash and probe. Names come from the map only (a miss asks the driver and puts).
struct KernelNameMemo {
  uintptr_t func;  // 0: empty
  uint64_t puts;
  uint32_t name;
};
constexpr int kNameMemos = 16;
// A stream's tail whose mark this thread deferred (shim/record/breadcrumbs.h): when the stream has been idle a while
// and the thread makes another call, a cuStreamQuery that answers CUDA_SUCCESS ("all operations in the stream have
// completed", cuda.h) proves it finished. A query puts nothing on the stream, so no PDL pair is split.
struct PendingTail {
  uintptr_t handle, ctx;        // as this thread passed it (ctx: for the NULL, legacy and per-thread streams)
  uint64_t gen, seq, since_ns;  // the stream cache's generation; the deferred launch; since when (or the last try)
  int slot;
};
constexpr int kPendingTails = 4;
struct StreamCache {
  StreamCacheEntry e[kStreamSets][kStreamWays];
  uint8_t next[kStreamSets];
  KernelNameMemo names[kNameMemos];
  PendingTail tails[kPendingTails];
  uint8_t ntails;
  // The entry found or filled last: tried first, with the set's own test (a thread launching on one stream).
  // Entries are overwritten in place, never moved, and no two of a set match one handle (a fill follows a miss).
  const StreamCacheEntry* last;
};
// A thread without a cache: one entry, filled each time.
[[gnu::tls_model("initial-exec")]] thread_local StreamCacheEntry tl_one_stream;

// What prepare_launch looked up for the launch this thread is making: record_launch takes it instead of looking
// both up again (the stream's id as it was before the launch, and the kernel's name). A copy, not a pointer into
// the cache (the entry may be replaced in between), valid for one record: `stream` is the handle it was resolved
// for (record_launch resolves again when its stream differs: the CUPTI front end may prepare without one), `func`
// the handle the name is for. Cleared by every prepare_launch, taken by the record.
struct PreparedLaunch {
  bool valid;
  CUfunction func;
  uint32_t name;
  StreamCacheEntry stream;
};
[[gnu::tls_model("initial-exec")]] thread_local PreparedLaunch tl_prepared{};

// The context of a launch: for a created stream, its own (the one current when cdsa first saw it, cached with
// it); for the default streams, the current one, which costs a driver call. After a fault the driver may refuse
// even that: then the thread's last known context is the best answer.
CUcontext current_context() {
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  if (d.CtxGetCurrent && d.CtxGetCurrent(&ctx) == CUDA_SUCCESS)
    tl_last_ctx = ctx;
  else
    ctx = tl_last_ctx;
  return ctx;
}

// The context a created stream belongs to, as the driver says (cuStreamGetCtx): a program may launch on a stream of
// another context than the current one (the driver runs the work in the stream's), so the current context is no
// answer. 0 when the driver will not say: an unknown context is never taken for another one (the fault path's probes
// and the sync proofs key on it, shim/fault/fault.cc, SyncProof::context).
CUcontext stream_own_context(CUstream s) {
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  if (d.StreamGetCtx && d.StreamGetCtx(s, &ctx) == CUDA_SUCCESS) return ctx;
  return nullptr;
}

// What the exit probe needs to query a stream (shim/fault/exit_probe.cc): a handle and context that name it. Written
// when a thread first meets the stream (a cache miss), not on every launch: a cached entry holds the same values.
void note_probe_target(const StreamCacheEntry& e) {
  StreamState* st = stream_state(e.slot);
  if (!st) return;
  st->last_handle.store(e.handle, std::memory_order_relaxed);
  st->last_ctx.store(e.ctx, std::memory_order_relaxed);
  st->last_tid.store(this_tid(), std::memory_order_relaxed);  // a per-thread stream's own thread
}

// The stream's cache entry; `create`: a stream not seen before gets a StreamTable entry (a launch), else (another
// operation on it) null, and nothing is cached, so a later launch still creates it.
const StreamCacheEntry* resolve_stream(const InCdsa& guard, CUstream s, bool create = true) {
  uint64_t gen = g_stream_gen.load(std::memory_order_acquire);
  auto h = reinterpret_cast<uintptr_t>(s);
  const bool by_ctx = context_relative_stream(s);
  CUcontext ctx = by_ctx ? current_context() : nullptr;
  auto c = reinterpret_cast<uintptr_t>(ctx);
  StreamCache* cache = ThreadBlock<StreamCache>::get();
  const auto same = [&](const StreamCacheEntry& e) { return e.gen == gen && e.handle == h && (!by_ctx || e.ctx == c); };
  if (cache && cache->last && same(*cache->last)) return cache->last;
  uint32_t set = static_cast<uint32_t>(((h ^ c) * 0x9e3779b97f4a7c15ull) >> 60) & (kStreamSets - 1);
  if (cache)
    for (auto& e : cache->e[set])
      if (same(e)) return cache->last = &e;
  if (!by_ctx) {
    ctx = stream_own_context(s);
    c = reinterpret_cast<uintptr_t>(ctx);
  }
  const Driver& d = driver();
  unsigned long long id = 0, cid = 0;
  if (!d.StreamGetId || d.StreamGetId(s, &id) != CUDA_SUCCESS) {
    if (!create) return nullptr;
    // The driver cannot name the stream (typically: the context died during this very launch). Key it by
    // handle, in a range the driver's ids do not use, so the launch still gets a stream and a slot.
    id = (1ull << 63) | reinterpret_cast<uintptr_t>(s);
  }
  int slot = create ? stream_slot(id) : find_stream_slot(id);
  if (!create && slot < 0) return nullptr;
  if (d.CtxGetId && ctx) d.CtxGetId(ctx, &cid);
  note_context_device(guard, static_cast<uint32_t>(cid), ctx);  // the GPU's name and bus id, while the context lives
  StreamCacheEntry fresh{h, c, gen, id, slot, static_cast<uint32_t>(cid), stream_state(slot)};
  note_probe_target(fresh);
  if (!cache) {
    tl_one_stream = fresh;
    return &tl_one_stream;
  }
  StreamCacheEntry& e = cache->e[set][cache->next[set]];
  cache->next[set] = static_cast<uint8_t>((cache->next[set] + 1) % kStreamWays);
  e = fresh;
  return cache->last = &e;
}

// A handle whose name the driver would not give: cached too, so a launch makes no failing driver call.
constexpr uint32_t kNameUnknown = kNoString - 1;

// The driver's name for a launch handle, asked once per handle: a CUfunction (cuModuleGetFunction,
// cuKernelGetFunction) is named by cuFuncGetName, a CUkernel cast to CUfunction (cudart 12+/13's <<<>>> path) only
// by cuKernelGetName, which rejects a CUfunction as cuFuncGetName rejects a CUkernel (docs/attribution.md).
// Only a handle both calls reject is cached as unknown: a dead or missing context may clear up.
uint32_t lookup_kernel_name(CUfunction func) {
  const Driver& d = driver();
  bool transient = false;
  const char* s = nullptr;
  auto named = [&](CUresult r) {
    transient |= r == CUDA_ERROR_NOT_INITIALIZED || is_torn_down(r) || is_sticky_fault(r);
    return r == CUDA_SUCCESS && s;
  };
  if (d.FuncGetName && named(d.FuncGetName(&s, func))) return intern_string(s, strlen(s));
  s = nullptr;
  if (d.KernelGetName && named(d.KernelGetName(&s, reinterpret_cast<CUkernel>(func))))
    return intern_string(s, strlen(s));
  return transient ? kNoString : kNameUnknown;
}

// The map's answer (asking the driver on a miss), remembered in `memo` when it came from the map.
[[gnu::noinline]] uint32_t kernel_name_from_map(CUfunction func, KernelNameMemo* memo, uint64_t puts) {
  auto key = reinterpret_cast<uintptr_t>(func);
  uint32_t name = handle_map_get(HandleMap::KernelName, key);
  if (__builtin_expect(name == kNoString, 0)) {
    name = lookup_kernel_name(func);
    // Not cached when the string table is full (kNoString) or before any context exists: the lookup may work later.
    if (name != kNoString) handle_map_put(HandleMap::KernelName, key, name);
  } else if (memo) {
    *memo = KernelNameMemo{key, puts, name};
  }
  return name;
}

// Inline: a memo hit is a few loads and compares in the caller.
inline uint32_t kernel_name_of(const InCdsa&, CUfunction func) {
  if (!func) return kNoString;
  auto key = reinterpret_cast<uintptr_t>(func);
  const uint64_t puts = kernel_name_puts();
  StreamCache* cache = ThreadBlock<StreamCache>::get();
  KernelNameMemo* memo = cache ? &cache->names[(key >> 4 ^ key >> 10) & (kNameMemos - 1)] : nullptr;
  const uint32_t name =
      memo && memo->func == key && memo->puts == puts ? memo->name : kernel_name_from_map(func, memo, puts);
  return name == kNameUnknown ? kNoString : name;
}

// A mark is never enqueued on a capturing stream (it would become a node of the user's graph): a mark deferred
// when the capture began (a launch recorded on another thread just then) is dropped instead.
[[gnu::noinline]] bool capturing_slow(CUstream s) {
  if (!driver().StreamIsCapturing) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return driver().StreamIsCapturing(s, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}
inline bool capturing(CUstream s) { return captures_active() && capturing_slow(s); }

bool has_deferred(const StreamCacheEntry* sc) {
  StreamState* st = sc ? sc->state : nullptr;
  return st && st->deferred.load(std::memory_order_relaxed) != 0;
}

// How long a deferred tail waits before this thread asks whether its stream is done: a stream busy with its next
// launches settles the mark itself; an idle one is asked at most this often.
constexpr uint64_t kIdleTailNs = 500000;

// Launch `seq`'s mark on `sc`'s stream was deferred: remember it (the oldest entry gives way when all are taken).
void note_pending_tail(const StreamCacheEntry* sc, uint64_t seq) {
  StreamCache* cache = ThreadBlock<StreamCache>::get();
  if (!cache || !sc || sc->slot < 0) return;
  PendingTail t{sc->handle, sc->ctx, sc->gen, seq, launch_clock_internal::monotonic_ns(), sc->slot};
  for (int i = 0; i < cache->ntails; ++i)
    if (cache->tails[i].slot == sc->slot) {
      cache->tails[i] = t;
      return;
    }
  if (cache->ntails < kPendingTails) {
    cache->tails[cache->ntails++] = t;
    return;
  }
  int oldest = 0;
  for (int i = 1; i < kPendingTails; ++i)
    if (cache->tails[i].since_ns < cache->tails[oldest].since_ns) oldest = i;
  cache->tails[oldest] = t;
}

// The tails this thread deferred that have been idle a while: each stream whose cuStreamQuery answers CUDA_SUCCESS
// is proven finished up to the launches it had recorded before the query (note_stream_synced). Never during a
// stream capture (a query then may invalidate it), never a handle whose stream may have been destroyed since, and
// the NULL / legacy / per-thread streams only in the context they were launched in.
void prove_idle_tails(StreamCache* cache) {
  if (!cache || cache->ntails == 0 || captures_active() || !driver().StreamQuery) return;
  const uint64_t now = launch_clock_internal::monotonic_ns();
  const uint64_t gen = g_stream_gen.load(std::memory_order_acquire);
  CUcontext here = nullptr;
  bool know_here = false;
  for (int i = 0; i < cache->ntails;) {
    PendingTail& t = cache->tails[i];
    StreamState* st = stream_state(t.slot);
    const bool settled = !st || t.gen != gen || st->breadcrumb_launched.load(std::memory_order_acquire) >= t.seq ||
                         st->synced.load(std::memory_order_acquire) >= t.seq ||
                         st->deferred.load(std::memory_order_acquire) != t.seq;
    auto drop = [&] { t = cache->tails[--cache->ntails]; };
    if (settled) {
      drop();
      continue;
    }
    if (now - t.since_ns < kIdleTailNs) {
      ++i;
      continue;
    }
    auto h = reinterpret_cast<CUstream>(t.handle);
    if (context_relative_stream(h)) {
      if (!know_here) {
        here = current_context();
        know_here = true;
      }
      if (reinterpret_cast<uintptr_t>(here) != t.ctx) {
        ++i;
        continue;
      }
    }
    const uint64_t launched = st->launched.load(std::memory_order_acquire);
    CUresult r = driver().StreamQuery(h);
    if (r == CUDA_SUCCESS) {
      note_stream_synced(st, launched);
      drop();
    } else if (r == CUDA_ERROR_NOT_READY) {
      t.since_ns = now;
      ++i;
    } else {
      drop();  // the context died (the program's next call reports it), or the stream cannot be asked: no proof
    }
  }
}

}  // namespace

uint32_t kernel_name_id(const InCdsa& guard, CUfunction func) noexcept { return kernel_name_of(guard, func); }

void prepare_launch(CUfunction func, CUstream stream, bool per_thread, MarkBefore mark) noexcept {
  PreparedLaunch& p = tl_prepared;
  p.valid = false;
  if (!started() || InCdsa::active()) return;
  InCdsa guard;
  const bool marks = breadcrumbs_active() || breadcrumbs_init(guard);
  p.func = func;
  p.name = kernel_name_of(guard, func);
  CUstream eff = effective_stream(stream, per_thread);
  const StreamCacheEntry* sc = resolve_stream(guard, eff);  // into this thread's cache, named by the driver
  p.stream = *sc;
  p.valid = true;
  // From here until its record and mark (launch_succeeded / launch_failed): a region of the stream's order
  // (shim/record/stream_order.h), begun before the deferred mark is settled and before the driver sees the launch.
  begin_thread_region(sc->state);
  if (mark != MarkBefore::Leave && marks && has_deferred(sc))
    settle_breadcrumb(guard, eff, sc->state, sc->slot, mark == MarkBefore::Fold || capturing(eff));
  // Before the launch is submitted: a query after it could meet its fault and prove nothing.
  if (marks) prove_idle_tails(ThreadBlock<StreamCache>::peek());
}

bool before_stream_operation(CUstream stream, bool per_thread) noexcept {
  if (!started() || InCdsa::active() || !breadcrumbs_active()) return false;
  InCdsa guard;
  CUstream eff = effective_stream(stream, per_thread);
  const StreamCacheEntry* sc = resolve_stream(guard, eff, false);
  bool dead = false;
  if (has_deferred(sc)) dead = is_sticky_fault(settle_breadcrumb(guard, eff, sc->state, sc->slot, capturing(eff)));
  prove_idle_tails(ThreadBlock<StreamCache>::peek());
  return dead;
}

namespace {
std::atomic<bool> g_stream_work_unseen{false};
}  // namespace

void note_stream_work_unseen() noexcept { g_stream_work_unseen.store(true, std::memory_order_release); }
bool stream_work_unseen() noexcept { return g_stream_work_unseen.load(std::memory_order_acquire); }

void note_stream_work(CUstream stream, bool per_thread) noexcept {
  if (!started() || InCdsa::active()) return;
  InCdsa guard;
  CUstream eff = effective_stream(stream, per_thread);
  if (capturing(eff)) return;
  const StreamCacheEntry* sc = resolve_stream(guard, eff);
  if (!sc || !sc->state) return;  // the stream table is full (g_stream_table_full): no verdict is exact then
  StreamState& st = *sc->state;
  // Until the driver call returned (end_thread_region, in the wrapper): a region of the stream's order, begun before
  // the op's position is read (shim/record/stream_order.h).
  begin_thread_region(&st);
  const uint64_t at = st.launched.load(std::memory_order_acquire) + 1;
  const uint64_t n = st.ops.fetch_add(1, std::memory_order_acq_rel);
  const uint64_t old = st.op_at[n % StreamState::kOpsKept].exchange(at, std::memory_order_acq_rel);
  uint64_t seen = st.ops_forgotten.load(std::memory_order_relaxed);
  while (old > seen && !st.ops_forgotten.compare_exchange_weak(seen, old, std::memory_order_acq_rel)) {
  }
}

void before_context_teardown() noexcept {
  if (!started() || InCdsa::active() || !breadcrumbs_active()) return;
  InCdsa guard;
  flush_all_breadcrumbs(guard);
  destroy_pdl_events();
}

void before_stream_destroy(CUstream stream, bool per_thread) noexcept {
  if (!started() || InCdsa::active() || !breadcrumbs_active()) return;
  InCdsa guard;
  CUstream eff = effective_stream(stream, per_thread);
  const StreamCacheEntry* sc = resolve_stream(guard, eff, false);
  if (!sc) return;
  if (has_deferred(sc)) settle_breadcrumb(guard, eff, sc->state, sc->slot, capturing(eff));
  destroy_stream_pdl_event(sc->slot);
}

namespace {
// The ops a synchronizing call that begins now proves: every op counted so far, unless another thread is between
// counting an op and handing it to the driver (an op region open, shim/record/stream_order.h: read after the count,
// so an op counted is either seen open or, its region exited, submitted before this call), which the call may not
// cover. Then none: ops carry no per-op submission order to prove a prefix by.
uint64_t proven_ops(const StreamState* st) {
  const uint64_t ops = st->ops.load(std::memory_order_acquire);
  return other_regions_open(st) ? 0 : ops;
}
}  // namespace

SyncProof SyncProof::stream(CUstream stream, bool per_thread) noexcept {
  SyncProof p;
  if (!started() || InCdsa::active()) return p;
  InCdsa guard;
  CUstream eff = effective_stream(stream, per_thread);
  const StreamCacheEntry* sc = resolve_stream(guard, eff, false);
  if (!sc || !sc->state) return p;
  if (breadcrumbs_active() && has_deferred(sc)) settle_breadcrumb(guard, eff, sc->state, sc->slot, capturing(eff));
  p.seen_.push_back({sc->slot, sc->state->launched.load(std::memory_order_acquire), proven_ops(sc->state)});
  prove_idle_tails(ThreadBlock<StreamCache>::peek());
  return p;
}

SyncProof SyncProof::context(CUcontext ctx) noexcept {
  SyncProof p;
  if (!started() || InCdsa::active()) return p;
  InCdsa guard;
  if (!ctx && (!driver().CtxGetCurrent || driver().CtxGetCurrent(&ctx) != CUDA_SUCCESS)) return p;
  if (!ctx) return p;
  prove_idle_tails(ThreadBlock<StreamCache>::peek());  // before the sync: a tail it then proves needs no query
  for (uint32_t i = 0; i < stream_capacity(); ++i) {
    StreamState* st = stream_state(static_cast<int>(i));
    if (!st) break;
    if (st->id.load(std::memory_order_acquire) == 0) continue;
    if (st->last_ctx.load(std::memory_order_relaxed) != reinterpret_cast<uintptr_t>(ctx)) continue;
    uint64_t n = st->launched.load(std::memory_order_acquire);
    uint64_t ops = proven_ops(st);
    if (n > st->synced.load(std::memory_order_relaxed) || ops > st->ops_synced.load(std::memory_order_relaxed))
      p.seen_.push_back({static_cast<int>(i), n, ops});
  }
  return p;
}

void SyncProof::succeeded() const noexcept {
  for (const Seen& s : seen_) note_stream_synced(stream_state(s.slot), s.launched, s.ops);
}

uintptr_t synchronized_context(CUcontext ctx) noexcept {
  if (!ctx && (!driver().CtxGetCurrent || driver().CtxGetCurrent(&ctx) != CUDA_SUCCESS)) return 0;
  return reinterpret_cast<uintptr_t>(ctx);
}

uintptr_t stream_context(CUstream stream, bool per_thread) noexcept {
  if (!started() || InCdsa::active()) return 0;
  InCdsa guard;
  const StreamCacheEntry* sc = resolve_stream(guard, effective_stream(stream, per_thread), false);
  StreamState* st = sc ? sc->state : nullptr;
  return st ? st->last_ctx.load(std::memory_order_relaxed) : 0;
}

void note_module_unloaded() noexcept {
  if (started()) handle_map_forget_values(HandleMap::KernelName);
}

void note_context_torn_down() noexcept {
  if (started()) handle_map_forget_values(HandleMap::KernelName);
}

void note_primary_context_released(CUdevice dev, CUresult r) noexcept {
  if (!started()) return;
  const Driver& d = driver();
  unsigned int flags = 0;
  int active = 1;
  // Still active (a release that left references): its handles live on. Else (or unknown): forget.
  if (r == CUDA_SUCCESS && d.DevicePrimaryCtxGetState &&
      d.DevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active)
    return;
  if (r != CUDA_SUCCESS && !is_sticky_fault(r)) return;  // refused: nothing was released
  handle_map_forget_values(HandleMap::KernelName);
}

void note_kernel_name(CUfunction func, const char* name, bool replace) noexcept {
  if (!func || !name || !*name || !started()) return;
  auto key = reinterpret_cast<uintptr_t>(func);
  const size_t len = strnlen(name, 511);
  const uint32_t known = handle_map_get(HandleMap::KernelName, key);
  if (known != kNoString && !replace) return;
  if (known != kNoString && known != kNameUnknown) {
    // The same name (the common case: one compare per launch) keeps the entry; another replaces it.
    const char* had = string_at(known);
    if (strncmp(had, name, len) == 0 && had[len] == '\0') return;
  }
  uint32_t id = intern_string(name, len);
  if (id != kNoString) handle_map_put(HandleMap::KernelName, key, id);
}

void record_launch(const LaunchInfo& info, LaunchSource source) noexcept {
  if (!started() || InCdsa::active() || ring_sealed()) return;
  if (source == LaunchSource::Interposer) {
    LaunchFilter filter = g_filter.load(std::memory_order_relaxed);
    if (filter && filter(info)) return;  // another front end (CUPTI) recorded this very call
  }
  InCdsa guard;
  CUstream eff = effective_stream(info.stream, info.per_thread);
  PreparedLaunch& p = tl_prepared;
  const bool prepared = p.valid;
  p.valid = false;
  const StreamCacheEntry* sc =
      prepared && p.stream.handle == reinterpret_cast<uintptr_t>(eff) ? &p.stream : resolve_stream(guard, eff);

  LaunchRecord r;
  r.seq = next_launch_seq();
  r.kind = info.kind;
  r.stream_id = sc->id;
  r.ctx_id = sc->ctx_id;
  r.stream_slot = sc->slot >= 0 ? static_cast<uint32_t>(sc->slot) : 0xffffffffu;
  r.tid = this_tid();
  r.stamp = launch_stamp();
  for (int i = 0; i < 3; ++i) {
    r.grid[i] = info.grid[i];
    r.block[i] = info.block[i];
  }
  r.shared_mem = info.shared_mem;
  if (info.per_thread && info.stream == nullptr) r.flags |= kFlagPerThreadStream;
  r.kernel_name = prepared && p.func == info.func ? p.name : kernel_name_of(guard, info.func);
  r.stack_id = capture_and_intern_stack();

  bool capturing = false;
  if (captures_active() && driver().StreamIsCapturing) {  // the driver table only while a capture is active
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    capturing =
        driver().StreamIsCapturing(eff, &status) == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  if (capturing) {
    // No breadcrumb: a captured write would freeze its value into the graph.
    r.flags |= kFlagCaptured;
    note_captured_launch(guard, &r);
    ring_publish(r);
    return;
  }
  profile_count(r.stack_id, r.kernel_name);  // captured launches do not run: not counted
  if (info.kind == LaunchKind::Graph) {
    uint32_t token = handle_map_get(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(info.graph_exec));
    r.graph_id = token == kNoString ? 0 : token;
    if (r.graph_id) note_table_launched(token);  // the exec's next change must leave this node table as it is
  }

  StreamState* st = sc->state;
  // A record on a stream this thread holds no region on (a launch whose call named another stream, or none: the
  // multi-device cooperative launch): no region covered its driver call, so it counts as overlapping.
  StreamState* const outside = st && st != thread_region_stream() ? st : nullptr;
  uint32_t outside_entries = 0;
  if (__builtin_expect(outside != nullptr, 0)) outside_entries = enter_region(outside).entries;
  bool mark_now = false;
  if (st) {
    r.stream_seq = st->launched.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (info.programmatic) r.flags |= kFlagProgrammatic;
    // prepare_launch enqueued the previous launch's mark, or folded it (a PDL launch), or it failed: then this
    // launch's mark is the first that covers the previous launch.
    if (st->breadcrumb_launched.load(std::memory_order_acquire) + 1 < r.stream_seq) r.flags |= kFlagSharesMark;
    if (breadcrumbs_init(guard)) {
      // Deferred to the stream's next operation where a PDL launch may come next; else placed now, below.
      if (breadcrumb_deferred(st, info.programmatic))
        defer_breadcrumb(st, r.stream_seq, info.programmatic);
      else
        mark_now = true;
    }
  }
  ring_publish(r);
  // After the record: a snapshot that sees this mark land sees the launch it proves finished.
  if (mark_now)
    place_breadcrumb_now(guard, eff, st, sc->slot, r.stream_seq);
  else if (st && st->deferred.load(std::memory_order_relaxed) == r.stream_seq)
    note_pending_tail(sc, r.stream_seq);
  if (__builtin_expect(outside != nullptr, 0)) stream_order_internal::exit_region(outside, outside_entries, true);
}

void note_stream_destroyed() noexcept { g_stream_gen.fetch_add(1, std::memory_order_acq_rel); }

void set_launch_filter(LaunchFilter filter) noexcept { g_filter.store(filter, std::memory_order_release); }

}  // namespace cdsa
