// cdsa simulated CUDA driver (tests only): Streams and their workers, events, stream memory operations, host functions.
// See README.md for the contract and sim_internal.h for the shared state.

#include <fcntl.h>
#include <pthread.h>

#include <algorithm>

#include "base/io.h"
#include "sim_internal.h"

namespace sim {

// ---------------------------------------------------------------- streams

namespace {
// The calling thread's per-thread streams, one per context incarnation it used (the streams live in S().per_thread).
// A plain pointer, not a thread_local with a destructor: that one is destroyed when exit() runs the main thread's
// TLS destructors, before the atexit handlers and the library destructors that may still use the per-thread stream
// (State is never freed: README, Process exit), which then used freed memory. The list is freed by a pthread key's
// destructor when a thread ends (after its thread_local destructors), never by exit().
using PerThreadList = std::vector<std::pair<unsigned long long, Stream*>>;
thread_local PerThreadList* t_per_thread = nullptr;
PerThreadList& per_thread_list() {
  static pthread_key_t key = [] {
    pthread_key_t k;
    pthread_key_create(&k, [](void* p) {
      delete static_cast<PerThreadList*>(p);
      t_per_thread = nullptr;
    });
    return k;
  }();
  if (t_per_thread == nullptr) {
    t_per_thread = new PerThreadList();
    pthread_setspecific(key, t_per_thread);
  }
  return *t_per_thread;
}
}  // namespace

StreamP legacy_locked(CUctx_st* c) {
  Sim& g = S();
  if (!c->legacy) {
    // Device 0's primary context's first legacy stream keeps the id 1; every other one takes the next id.
    const bool first = c->primary && c->device == 0 && !g.legacy_id_taken;
    uint64_t id = first ? 1 : g.next_stream_id++;
    g.legacy_id_taken |= first;
    c->legacy = std::make_shared<Stream>(Stream::Legacy, id, CtxRef::of(c));
  }
  return c->legacy;
}

StreamP per_thread_locked(CUctx_st* c) {
  Sim& g = S();
  PerThreadList& mine = per_thread_list();
  for (auto& [id, s] : mine)
    if (id == c->id && s->ctx.ctx == c) return s->shared_from_this();
  auto s = std::make_shared<Stream>(Stream::PerThread, g.next_stream_id++, CtxRef::of(c));
  g.per_thread.push_back(s);
  mine.emplace_back(c->id, s.get());
  return s;
}

CUresult resolve_locked(CUstream h, bool ptsz, StreamP& out) {
  Sim& g = S();
  if (h == nullptr) h = ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    CUctx_st* c = t_current;
    if (CUresult r = current_ctx_check(c); r != CUDA_SUCCESS) return r;
    out = h == CU_STREAM_LEGACY ? legacy_locked(c) : per_thread_locked(c);
    return CUDA_SUCCESS;
  }
  auto it = g.streams.find(h);
  if (it == g.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (it->second->gone) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  out = it->second;
  return CUDA_SUCCESS;
}

namespace {
// Item `seq` of `s` finished (or was discarded): `done` advances over every item finished in order.
void complete_locked(Stream& s, uint64_t seq) {
  if (seq == s.done + 1) {
    ++s.done;
    while (!s.finished_early.empty() && *s.finished_early.begin() == s.done + 1) {
      s.finished_early.erase(s.finished_early.begin());
      ++s.done;
    }
  } else {
    s.finished_early.insert(seq);
  }
  S().progress.notify_all();
}

bool finished_locked(const Stream& s, uint64_t seq) { return seq <= s.done || s.finished_early.count(seq) != 0; }
}  // namespace

CUresult enqueue_locked(Stream& s, Item&& it, bool programmatic) {
  Sim& g = S();
  it.seq = s.submitted + 1;
  if (g.shutdown) {  // workers are gone: discard
    ++s.submitted;
    complete_locked(s, it.seq);
    return CUDA_SUCCESS;
  }
  if (!s.started) {
    try {
      s.worker = std::thread(worker_main, s.shared_from_this());
    } catch (...) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s.started = true;
  }
  ++s.submitted;
  if (sched_on()) {
    // A PDL secondary right after a kernel may start beside it: it and what follows it need not wait for it.
    std::erase_if(s.skip_now, [&](uint64_t q) { return finished_locked(s, q); });
    if (programmatic && s.last_plain_kernel) s.skip_now.push_back(it.seq - 1);
    it.skip = s.skip_now;
  }
  s.q.push_back(std::move(it));
  s.cv.notify_one();
  return CUDA_SUCCESS;
}

void barrier_locked(Stream& s) {
  s.skip_now.clear();
  s.last_plain_kernel = false;
}

Stream::LastOp op_of(Item::Kind k) {
  switch (k) {
    case Item::Kernel:
      return Stream::LastOp::Kernel;
    case Item::Write32:
    case Item::Write64:
      return Stream::LastOp::Memop;
    case Item::Copy:
    case Item::Memset8:
    case Item::Memset32:
      return Stream::LastOp::Copy;
    case Item::HostFn:
      return Stream::LastOp::HostFn;
    case Item::WaitEvent:
      return Stream::LastOp::Event;
  }
  return Stream::LastOp::Other;
}

CUresult submit_locked(Stream& s, Item&& it, bool programmatic, bool plain_kernel) {
  if (s.capturing) {
    if (s.cig && (it.kind == Item::Write32 || it.kind == Item::Write64 || it.kind == Item::HostFn))
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    capture_item_locked(*s.capture, std::move(it));
    return CUDA_SUCCESS;
  }
  Stream::LastOp op = op_of(it.kind);
  CUresult r = enqueue_locked(s, std::move(it), programmatic);
  if (r == CUDA_SUCCESS) {
    s.last_op = op;
    s.last_plain_kernel = plain_kernel;
  }
  return r;
}

// SIM_CUDA_PDL_LOG=<file>: one line per launch with programmatic stream serialization that reaches a stream
// (not a capture): "<stream id> kept|lost <predecessor>". Lost: the stream's previous operation (a queued item, an
// event record or wait) is not a kernel, so on a GPU the launch could not overlap the kernel before it.
void note_pdl_launch_locked(const Stream& s) {
  static const char* path = getenv("SIM_CUDA_PDL_LOG");
  if (path == nullptr || *path == '\0' || s.capturing) return;
  static const char* const kNames[] = {"none", "kernel", "memop", "copy", "host-function", "event", "other"};
  const bool lost = s.last_op != Stream::LastOp::Kernel && s.last_op != Stream::LastOp::None;
  char line[128];
  int n = snprintf(line, sizeof line, "%llu %s %s\n", static_cast<unsigned long long>(s.id), lost ? "lost" : "kept",
                   kNames[static_cast<int>(s.last_op)]);
  if (n <= 0) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  cdsa::base::write_all(fd, line, static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1);
  close(fd);
}

void wait_stream_locked(Lock& lk, const StreamP& s, uint64_t seq) {
  S().progress.wait(lk, [&] { return s->done >= seq; });
}

void wait_stream_locked(Lock& lk, const StreamP& s) { wait_stream_locked(lk, s, s->submitted); }

std::vector<std::pair<StreamP, uint64_t>> streams_of_locked(const CUctx_st* c) {
  Sim& g = S();
  std::vector<std::pair<StreamP, uint64_t>> v;
  auto take = [&](const StreamP& s) {
    if (!s->gone && (c == nullptr || (s->ctx.ctx == c && s->ctx.id == c->id))) v.emplace_back(s, s->submitted);
  };
  for (auto& [h, ctx] : g.contexts)
    if (ctx->legacy) take(ctx->legacy);
  for (auto& [h, s] : g.streams) take(s);
  for (auto& s : g.per_thread) take(s);
  return v;
}

void wait_all_locked(Lock& lk, const CUctx_st* c) {
  for (auto& [s, seq] : streams_of_locked(c)) wait_stream_locked(lk, s, seq);
}

CUresult synchronize_ctx(CUctx_st* c) {
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    if (g.capturing > 0)
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else
      wait_all_locked(lk, c);
  }
  return finish_in(c, r);
}

// Copies, memsets and host functions (no lock held).
void run_plain(const Item& it) {
  switch (it.kind) {
    case Item::Copy:
      memcpy(it.dst, it.src, it.n);
      return;
    case Item::Memset8:
      fill_memory(it.dst, it.value, it.n, false);
      return;
    case Item::Memset32:
      fill_memory(it.dst, it.value, it.n, true);
      return;
    case Item::HostFn:
      it.fn(it.dst);
      return;
    default:
      return;
  }
}

namespace {

bool ctx_dead(const Stream& s) { return s.ctx.ctx->sticky.load(std::memory_order_relaxed) != 0; }

// A memop lands: an atomic release store, unless its target was unregistered since (a fault, 700).
void land_memop_locked(Stream& s, const Item& it) {
  size_t n = it.kind == Item::Write32 ? 4 : 8;
  if (!memop_target_ok_locked(it.addr, n)) {
    set_fault_locked(s, Fault{CUDA_ERROR_ILLEGAL_ADDRESS, {}}, it);
    return;
  }
  if (n == 4)
    __atomic_store_n(reinterpret_cast<uint32_t*>(it.addr), static_cast<uint32_t>(it.value), __ATOMIC_RELEASE);
  else
    __atomic_store_n(reinterpret_cast<uint64_t*>(it.addr), it.value, __ATOMIC_RELEASE);
}

// A running item reached its end: its effect (a memop's store) or fault lands, unless its context died meanwhile
// (a memop not yet landed never lands; a kernel's fault is still logged).
void finish_running_locked(Stream& s, Running& r) {
  if (r.item.kind == Item::Write32 || r.item.kind == Item::Write64) {
    if (!ctx_dead(s) && !s.abort && !S().shutdown) land_memop_locked(s, r.item);
  } else if (r.fault.code != CUDA_SUCCESS && !s.abort && !S().shutdown) {
    set_fault_locked(s, std::move(r.fault), r.item);
  }
  complete_locked(s, r.seq);
}

// The front item may start: every item before it has finished, but for those it need not wait for (Item::skip).
bool startable_locked(const Stream& s) {
  const Item& next = s.q.front();
  for (const Running& r : s.running)
    if (std::find(next.skip.begin(), next.skip.end(), r.seq) == next.skip.end()) return false;
  return true;
}

// Starts the front item (the lock may be released meanwhile). Effects happen at the start, in stream order (a
// kernel's output, a copy); what takes time becomes a Running item: a kernel's seeded duration (its fault lands at
// the end), a sleep_us, a memop's seeded delay (it lands at the end).
void start_front_locked(Lock& lk, Stream& s) {
  Sim& g = S();
  Item it = std::move(s.q.front());
  s.q.pop_front();
  const auto now = Clock::now();
  switch (it.kind) {
    case Item::WaitEvent: {
      StreamP other = it.wait_stream;
      uint64_t seq = it.wait_seq;
      g.progress.wait(lk, [&] { return other->done >= seq || ctx_dead(s) || s.abort || g.shutdown; });
      complete_locked(s, it.seq);
      return;
    }
    case Item::Write32:
    case Item::Write64: {
      int64_t us = sched_delay_us(s.id, it.seq);
      if (us == 0) {
        land_memop_locked(s, it);
        complete_locked(s, it.seq);
        return;
      }
      uint64_t seq = it.seq;
      s.running.push_back(Running{seq, now + std::chrono::microseconds(us), std::move(it), {}});
      return;
    }
    case Item::Copy:
    case Item::Memset8:
    case Item::Memset32:
    case Item::HostFn:
      lk.unlock();
      run_plain(it);
      lk.lock();
      complete_locked(s, it.seq);
      return;
    case Item::Kernel: {
      int64_t us;
      Fault f;
      if (it.k->id == KernelId::SleepUs) {
        us = it.arg<int64_t>(0);
      } else {
        lk.unlock();
        f = run_kernel(it);
        lk.lock();
        us = sched_delay_us(s.id, it.seq);
      }
      if (us <= 0) {
        if (f.code != CUDA_SUCCESS) set_fault_locked(s, std::move(f), it);
        complete_locked(s, it.seq);
        return;
      }
      uint64_t seq = it.seq;
      s.running.push_back(Running{seq, Clock::now() + std::chrono::microseconds(us), std::move(it), std::move(f)});
      return;
    }
  }
}

}  // namespace

// One stream's worker: starts its items in order, each once every earlier one it waits for has finished, and
// finishes running ones at their end. Without a seed an item waits for every earlier one: one at a time.
void worker_main(StreamP sp) {
  Sim& g = S();
  Stream& s = *sp;
  Lock lk(g.mu);
  for (;;) {
    if (ctx_dead(s) || s.abort || g.shutdown) {  // dead context / going away / exiting: discard the queue
      while (!s.q.empty()) {
        uint64_t seq = s.q.front().seq;
        s.q.pop_front();
        complete_locked(s, seq);
      }
      if (s.abort || g.shutdown) {  // cut running work short
        for (Running& r : s.running) finish_running_locked(s, r);
        s.running.clear();
      }
    }
    // Finish what reached its end, earliest first; then look again (a fault may have made the context dead).
    const auto now = Clock::now();
    auto first = s.running.end();
    for (auto r = s.running.begin(); r != s.running.end(); ++r)
      if (r->end <= now && (first == s.running.end() || r->end < first->end)) first = r;
    if (first != s.running.end()) {
      Running r = std::move(*first);
      s.running.erase(first);
      finish_running_locked(s, r);
      continue;
    }
    if (!s.q.empty() && !ctx_dead(s) && !s.abort && !g.shutdown && startable_locked(s)) {
      start_front_locked(lk, s);
      continue;
    }
    if (s.q.empty() && s.running.empty() && s.stop) break;
    if (s.running.empty()) {
      s.cv.wait(lk);
    } else {
      auto end = s.running.front().end;
      for (const Running& r : s.running) end = std::min(end, r.end);
      s.cv.wait_until(lk, end);
    }
  }
}

// ---------------------------------------------------------------- streams API

CUresult stream_sync(CUstream h, bool ptsz) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r;
  CUctx_st* c = t_current;
  {
    Lock lk(S().mu);
    StreamP s;
    r = resolve_locked(h, ptsz, s);
    if (r == CUDA_SUCCESS) c = s->ctx.ctx;
    if (r == CUDA_SUCCESS && s->capturing) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS) wait_stream_locked(lk, s);
  }
  return finish_in(c, r);
}

CUresult stream_query(CUstream h, bool ptsz) {
  CUctx_st* c = nullptr;
  CUresult r = on_stream(h, ptsz, true, [&](const StreamP& s) {
    c = s->ctx.ctx;
    if (s->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return s->done < s->submitted ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  });
  CUresult e = observe(c);  // the fault happened while we looked
  return e != CUDA_SUCCESS ? e : r;
}

CUresult stream_get_id(CUstream h, unsigned long long* id, bool ptsz) {
  return on_stream(h, ptsz, id != nullptr, [&](const StreamP& s) {
    *id = s->id;
    return CUDA_SUCCESS;
  });
}

// cuStreamGetCtx: the context current when the stream was made; the NULL, legacy and per-thread handles: the
// current one (none: CUDA_ERROR_INVALID_CONTEXT), as cuda.h says. _v2 also answers the green context: the sim has
// none, so NULL ("the regular context in pCtx and NULL in pGreenCtx").
CUresult stream_get_ctx(CUstream h, CUcontext* pctx, CUgreenCtx* green, bool ptsz) {
  return on_stream(h, ptsz, pctx != nullptr, [&](const StreamP& s) {
    *pctx = s->ctx.ctx;
    if (green != nullptr) *green = nullptr;
    return CUDA_SUCCESS;
  });
}

CUresult stream_get_device(CUstream h, CUdevice* dev, bool ptsz) {
  return on_stream(h, ptsz, dev != nullptr, [&](const StreamP& s) {
    *dev = s->ctx.ctx->device;
    return CUDA_SUCCESS;
  });
}

CUresult stream_is_capturing(CUstream h, CUstreamCaptureStatus* st, bool ptsz) {
  return on_stream(h, ptsz, st != nullptr, [&](const StreamP& s) {
    *st = s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  });
}

// cuStreamWaitEvent: "hEvent may be from a different context or device than hStream" (cuda.h).
CUresult stream_wait_event(CUstream h, CUevent ev, unsigned flags, bool ptsz) {
  bool flags_ok = (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) == 0;
  return on_stream(h, ptsz, flags_ok, [&](const StreamP& s) -> CUresult {
    const Event* e = find_locked(&Sim::events, ev);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (!e->ctx.live()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (s->capturing) return CUDA_SUCCESS;  // accepted, ignored
    s->last_op = Stream::LastOp::Event;
    barrier_locked(*s);
    if (!e->s || e->s == s) return CUDA_SUCCESS;  // nothing to wait for / stream order suffices
    if (e->s->done >= e->seq) return CUDA_SUCCESS;
    Item it;
    it.kind = Item::WaitEvent;
    it.wait_stream = e->s;
    it.wait_seq = e->seq;
    return enqueue_locked(*s, std::move(it));
  });
}

// cuEventRecord: "hEvent and hStream must be from the same context otherwise CUDA_ERROR_INVALID_HANDLE is
// returned" (cuda.h).
CUresult event_record(CUevent ev, CUstream h, unsigned flags, bool ptsz) {
  bool flags_ok = (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) == 0;
  return on_stream(h, ptsz, flags_ok, [&](const StreamP& s) -> CUresult {
    Event* e = find_locked(&Sim::events, ev);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (e->ctx.ctx != s->ctx.ctx || e->ctx.id != s->ctx.id) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing && s->cig) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (s->capturing) return CUDA_SUCCESS;  // accepted, ignored
    s->last_op = Stream::LastOp::Event;
    barrier_locked(*s);
    e->s = s;
    e->seq = s->submitted;
    return CUDA_SUCCESS;
  });
}

CUresult memop(CUstream h, CUdeviceptr addr, uint64_t value, unsigned flags, bool is64, bool ptsz) {
  return on_stream(h, ptsz, true, [&](const StreamP& s) -> CUresult {
    if (flags & ~static_cast<unsigned>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) return CUDA_ERROR_INVALID_VALUE;
    if (is64 && no_64bit_memops()) return CUDA_ERROR_NOT_SUPPORTED;
    size_t n = is64 ? 8 : 4;
    if (addr == 0 || addr % n != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!memop_target_ok_locked(addr, n)) return CUDA_ERROR_INVALID_VALUE;
    Item it;
    it.kind = is64 ? Item::Write64 : Item::Write32;
    it.addr = addr;
    it.value = value;
    return submit_locked(*s, std::move(it));
  });
}

CUresult launch_host_func(CUstream h, CUhostFn fn, void* data, bool ptsz, bool args_ok) {
  return on_stream(h, ptsz, args_ok && fn != nullptr, [&](const StreamP& s) {
    Item it;
    it.kind = Item::HostFn;
    it.fn = fn;
    it.dst = data;
    return submit_locked(*s, std::move(it));
  });
}

}  // namespace sim

using namespace sim;

// ---- streams

namespace {
CUresult stream_create(CUstream* ph, unsigned flags) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  CtxRef ctx = CtxRef::of(t_current);
  return create_handle(&Sim::streams, ph,
                       [&] { return std::make_shared<Stream>(Stream::Created, S().next_stream_id++, ctx, flags); });
}

CUresult stream_destroy(CUstream h) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUctx_st* c = t_current;
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    auto it = g.streams.find(h);
    if (h == nullptr || it == g.streams.end()) {
      lk.unlock();
      return finish(CUDA_ERROR_INVALID_HANDLE);
    }
    StreamP s = it->second;
    g.streams.erase(it);
    if (s->gone) {
      r = CUDA_ERROR_CONTEXT_IS_DESTROYED;  // its context went first; the worker is gone already
    } else {
      c = s->ctx.ctx;
      if (s->capturing) end_capture_locked(*s);
      wait_stream_locked(lk, s);
      stop_worker(lk, *s);
    }
  }
  return finish_in(c, r);
}
}  // namespace

SIM_API CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) { return stream_create(phStream, Flags); }

SIM_API CUresult cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return stream_create(phStream, flags);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }
SIM_API CUresult cuStreamDestroy(CUstream hStream) { return stream_destroy(hStream); }

SIM_API CUresult cuStreamSynchronize(CUstream hStream) { return stream_sync(hStream, false); }
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_sync(hStream, true); }

SIM_API CUresult cuStreamQuery(CUstream hStream) { return stream_query(hStream, false); }
SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_query(hStream, true); }

SIM_API CUresult cuStreamGetId(CUstream hStream, unsigned long long* streamId) {
  return stream_get_id(hStream, streamId, false);
}
SIM_API CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long* streamId) {
  return stream_get_id(hStream, streamId, true);
}

SIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  return stream_get_ctx(hStream, pctx, nullptr, false);
}
SIM_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
  return stream_get_ctx(hStream, pctx, nullptr, true);
}
SIM_API CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  return stream_get_ctx(hStream, pCtx, pGreenCtx, false);
}
SIM_API CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  return stream_get_ctx(hStream, pCtx, pGreenCtx, true);
}
// "Returns the CUDA green context that the stream is associated with, or NULL if the stream is not associated with
// any green context" (cuda.h): the sim's streams never are.
SIM_API CUresult cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx* phCtx) {
  return on_stream(hStream, false, phCtx != nullptr, [&](const StreamP&) {
    *phCtx = nullptr;
    return CUDA_SUCCESS;
  });
}
SIM_API CUresult cuStreamGetDevice(CUstream hStream, CUdevice* device) {
  return stream_get_device(hStream, device, false);
}
SIM_API CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice* device) {
  return stream_get_device(hStream, device, true);
}

SIM_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return stream_is_capturing(hStream, captureStatus, false);
}
SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return stream_is_capturing(hStream, captureStatus, true);
}

SIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags, false);
}
SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return stream_wait_event(hStream, hEvent, Flags, true);
}

// ---- stream memory operations

// Each name comes twice: the plain one (a null stream is the legacy stream) and its _ptsz twin (the per-thread one).
#define SIM_STREAM_WRITE_VALUE(name, Value, is64)                                                    \
  SIM_API CUresult name(CUstream stream, CUdeviceptr addr, Value value, unsigned int flags) {        \
    return memop(stream, addr, value, flags, is64, false);                                           \
  }                                                                                                  \
  SIM_API CUresult name##_ptsz(CUstream stream, CUdeviceptr addr, Value value, unsigned int flags) { \
    return memop(stream, addr, value, flags, is64, true);                                            \
  }
SIM_STREAM_WRITE_VALUE(cuStreamWriteValue32_v2, cuuint32_t, false)
SIM_STREAM_WRITE_VALUE(cuStreamWriteValue32, cuuint32_t, false)
SIM_STREAM_WRITE_VALUE(cuStreamWriteValue64_v2, cuuint64_t, true)
SIM_STREAM_WRITE_VALUE(cuStreamWriteValue64, cuuint64_t, true)
#undef SIM_STREAM_WRITE_VALUE

// ---- events (each of the context current at cuEventCreate)

// SIM_CUDA_EVENT_LOG=<file>: one line per event made or destroyed, "create|destroy <events alive after it>", so a
// test can see whether a program (or a library in it) leaks events.
static void note_event_count(const char* what) {
  static const char* path = getenv("SIM_CUDA_EVENT_LOG");
  if (path == nullptr || *path == '\0') return;
  size_t alive;
  {
    Lock lk(S().mu);
    alive = S().events.size();
  }
  char line[64];
  int n = snprintf(line, sizeof line, "%s %zu\n", what, alive);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || n <= 0) return;
  cdsa::base::write_all(fd, line, static_cast<size_t>(n));
  close(fd);
}

SIM_API CUresult cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Flags & ~0xFu) return CUDA_ERROR_INVALID_VALUE;
  CtxRef ctx = CtxRef::of(t_current);
  r = create_handle(&Sim::events, phEvent, [&] { return std::make_unique<Event>(Event{ctx, nullptr, 0, Flags}); });
  if (r == CUDA_SUCCESS) note_event_count("create");
  return r;
}

SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0, false); }
SIM_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0, true); }
SIM_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return event_record(hEvent, hStream, flags, false);
}
SIM_API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return event_record(hEvent, hStream, flags, true);
}

// cuEventQuery / cuEventSynchronize answer the event's context's state (another context's fault is not theirs).
SIM_API CUresult cuEventQuery(CUevent hEvent) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUctx_st* c = ctx_of(&Sim::events, hEvent);
  CUresult r = observe(c);
  if (r != CUDA_SUCCESS) return r;
  {
    Lock lk(S().mu);
    const Event* e = find_locked(&Sim::events, hEvent);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (!e->ctx.live()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    r = (e->s && e->s->done < e->seq) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  }
  CUresult e = observe(c);  // the fault happened while we looked
  return e != CUDA_SUCCESS ? e : r;
}

SIM_API CUresult cuEventSynchronize(CUevent hEvent) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = CUDA_SUCCESS;
  CUctx_st* c = t_current;
  {
    Lock lk(S().mu);
    const Event* e = find_locked(&Sim::events, hEvent);
    if (e == nullptr) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else if (!e->ctx.live()) {
      r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    } else {
      c = e->ctx.ctx;
      if (e->s) {
        StreamP s = e->s;
        uint64_t seq = e->seq;
        wait_stream_locked(lk, s, seq);
      }
    }
  }
  return finish_in(c, r);
}

namespace {
CUresult event_destroy(CUevent h) {
  CUresult r = destroy_handle(&Sim::events, h);
  if (r == CUDA_SUCCESS) note_event_count("destroy");
  return r;
}
}  // namespace

SIM_API CUresult cuEventDestroy_v2(CUevent hEvent) { return event_destroy(hEvent); }
SIM_API CUresult cuEventDestroy(CUevent hEvent) { return event_destroy(hEvent); }

SIM_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, false, true);
}
SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, true, true);
}
#if CUDA_VERSION >= 13010
// CUDA 13.1's form: the same host call in stream order, with a CUhostTaskSyncMode for the thread that runs it
// (the sim's worker runs it either way). A value cuda.h does not define is refused like a NULL fn
// (CUDA_ERROR_INVALID_VALUE, *assumed*: cuda.h lists no error for it), which shows the fourth argument arrived.
namespace {
bool known_sync_mode(unsigned int m) { return m == CU_HOST_TASK_BLOCKING || m == CU_HOST_TASK_SPINWAIT; }
}  // namespace
SIM_API CUresult cuLaunchHostFunc_v2(CUstream hStream, CUhostFn fn, void* userData, unsigned int syncMode) {
  return launch_host_func(hStream, fn, userData, false, known_sync_mode(syncMode));
}
SIM_API CUresult cuLaunchHostFunc_v2_ptsz(CUstream hStream, CUhostFn fn, void* userData, unsigned int syncMode) {
  return launch_host_func(hStream, fn, userData, true, known_sync_mode(syncMode));
}
#endif
