// cdsa simulated CUDA driver (tests only): Streams and their workers, events, stream memory operations, host functions.
// See README.md for the contract and sim_internal.h for the shared state.

#include <fcntl.h>

#include "base/io.h"
#include "sim_internal.h"

namespace sim {

// ---------------------------------------------------------------- streams

void worker_main(StreamP sp);

StreamP per_thread_locked() {
  Sim& g = S();
  if (t_per_thread == nullptr) {
    auto s = std::make_shared<Stream>(Stream::PerThread, g.next_stream_id++);
    g.per_thread.push_back(s);
    t_per_thread = s.get();
    return s;
  }
  return t_per_thread->shared_from_this();
}

// Resolves a stream handle; `ptsz` says the entry point is a _ptsz/_ptds one.
CUresult resolve_locked(CUstream h, bool ptsz, StreamP& out) {
  Sim& g = S();
  if (h == nullptr) h = ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  if (h == CU_STREAM_LEGACY) {
    out = g.legacy;
    return CUDA_SUCCESS;
  }
  if (h == CU_STREAM_PER_THREAD) {
    out = per_thread_locked();
    return CUDA_SUCCESS;
  }
  auto it = g.streams.find(h);
  if (it == g.streams.end()) return CUDA_ERROR_INVALID_HANDLE;
  out = it->second;
  return CUDA_SUCCESS;
}

CUresult enqueue_locked(Stream& s, Item&& it) {
  Sim& g = S();
  if (g.shutdown) {  // workers are gone: discard
    ++s.submitted;
    ++s.done;
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
  s.q.push_back(std::move(it));
  s.cv.notify_one();
  return CUDA_SUCCESS;
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

// Queues on the stream, or appends to its capture.
CUresult submit_locked(Stream& s, Item&& it) {
  if (s.capturing) {
    capture_item_locked(*s.capture, std::move(it));
    return CUDA_SUCCESS;
  }
  Stream::LastOp op = op_of(it.kind);
  CUresult r = enqueue_locked(s, std::move(it));
  if (r == CUDA_SUCCESS) s.last_op = op;
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

std::vector<std::pair<StreamP, uint64_t>> all_streams_locked() {
  Sim& g = S();
  std::vector<std::pair<StreamP, uint64_t>> v;
  v.reserve(g.streams.size() + g.per_thread.size() + 1);
  v.emplace_back(g.legacy, g.legacy->submitted);
  for (auto& [h, s] : g.streams) v.emplace_back(s, s->submitted);
  for (auto& s : g.per_thread) v.emplace_back(s, s->submitted);
  return v;
}

// Waits for all work submitted so far on every stream.
void wait_all_locked(Lock& lk) {
  for (auto& [s, seq] : all_streams_locked()) wait_stream_locked(lk, s, seq);
}

CUresult synchronize_all() {
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    if (g.capturing > 0)
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else
      wait_all_locked(lk);
  }
  return finish(r);
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

// Runs one item; called with the lock held, may release it meanwhile.
void run_item_locked(Lock& lk, Item& it) {
  Sim& g = S();
  switch (it.kind) {
    case Item::WaitEvent:
      g.progress.wait(lk, [&] { return it.wait_stream->done >= it.wait_seq || g.dead || g.shutdown; });
      return;
    case Item::Write32:
    case Item::Write64: {
      size_t n = it.kind == Item::Write32 ? 4 : 8;
      if (!memop_target_ok_locked(it.addr, n)) {  // unregistered since
        set_fault_locked(CUDA_ERROR_ILLEGAL_ADDRESS, {});
        return;
      }
      if (n == 4)
        __atomic_store_n(reinterpret_cast<uint32_t*>(it.addr), static_cast<uint32_t>(it.value), __ATOMIC_RELEASE);
      else
        __atomic_store_n(reinterpret_cast<uint64_t*>(it.addr), it.value, __ATOMIC_RELEASE);
      return;
    }
    case Item::Copy:
    case Item::Memset8:
    case Item::Memset32:
    case Item::HostFn:
      lk.unlock();
      run_plain(it);
      lk.lock();
      return;
    case Item::Kernel: {
      if (it.k->id == KernelId::SleepUs) {
        int64_t us = it.arg<int64_t>(0);
        if (us > 0) {
          auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
          g.shutdown_cv.wait_until(lk, deadline, [&] { return g.shutdown; });
        }
        return;
      }
      lk.unlock();
      Fault f = run_kernel(it);
      lk.lock();
      if (f.code != CUDA_SUCCESS) set_fault_locked(f.code, std::move(f.lines));
      return;
    }
  }
}

void worker_main(StreamP sp) {
  Sim& g = S();
  Stream& s = *sp;
  Lock lk(g.mu);
  for (;;) {
    s.cv.wait(lk, [&] { return !s.q.empty() || s.stop; });
    if (s.q.empty()) break;      // stop requested and nothing left
    if (g.dead || g.shutdown) {  // dead context / exiting: discard
      s.done += s.q.size();
      s.q.clear();
      g.progress.notify_all();
      continue;
    }
    Item it = std::move(s.q.front());
    s.q.pop_front();
    run_item_locked(lk, it);
    ++s.done;
    g.progress.notify_all();
  }
}

// ---------------------------------------------------------------- streams API

CUresult stream_sync(CUstream h, bool ptsz) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r;
  {
    Lock lk(S().mu);
    StreamP s;
    r = resolve_locked(h, ptsz, s);
    if (r == CUDA_SUCCESS && s->capturing) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (r == CUDA_SUCCESS) wait_stream_locked(lk, s);
  }
  return finish(r);
}

CUresult stream_query(CUstream h, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Sim& g = S();
  {
    Lock lk(g.mu);
    StreamP s;
    if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
    if (s->capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    r = s->done < s->submitted ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    if (!g.dead) return r;
  }
  return sticky_result();  // the fault happened while we looked
}

CUresult stream_get_id(CUstream h, unsigned long long* id, bool ptsz) {
  return on_stream(h, ptsz, id != nullptr, [&](const StreamP& s) {
    *id = s->id;
    return CUDA_SUCCESS;
  });
}

CUresult stream_is_capturing(CUstream h, CUstreamCaptureStatus* st, bool ptsz) {
  return on_stream(h, ptsz, st != nullptr, [&](const StreamP& s) {
    *st = s->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  });
}

CUresult stream_wait_event(CUstream h, CUevent ev, unsigned flags, bool ptsz) {
  bool flags_ok = (flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) == 0;
  return on_stream(h, ptsz, flags_ok, [&](const StreamP& s) -> CUresult {
    const Event* e = find_locked(&Sim::events, ev);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing) return CUDA_SUCCESS;  // accepted, ignored
    s->last_op = Stream::LastOp::Event;
    if (!e->s || e->s == s) return CUDA_SUCCESS;  // nothing to wait for / stream order suffices
    if (e->s->done >= e->seq) return CUDA_SUCCESS;
    Item it;
    it.kind = Item::WaitEvent;
    it.wait_stream = e->s;
    it.wait_seq = e->seq;
    return enqueue_locked(*s, std::move(it));
  });
}

CUresult event_record(CUevent ev, CUstream h, unsigned flags, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  Event* e = find_locked(&Sim::events, ev);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  if (s->capturing) return CUDA_SUCCESS;  // accepted, ignored
  s->last_op = Stream::LastOp::Event;
  e->s = s;
  e->seq = s->submitted;
  return CUDA_SUCCESS;
}

CUresult memop(CUstream h, CUdeviceptr addr, uint64_t value, unsigned flags, bool is64, bool ptsz) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (flags & ~static_cast<unsigned>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) return CUDA_ERROR_INVALID_VALUE;
  if (is64 && no_64bit_memops()) return CUDA_ERROR_NOT_SUPPORTED;
  size_t n = is64 ? 8 : 4;
  if (addr == 0 || addr % n != 0) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  if (!memop_target_ok_locked(addr, n)) return CUDA_ERROR_INVALID_VALUE;
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  Item it;
  it.kind = is64 ? Item::Write64 : Item::Write32;
  it.addr = addr;
  it.value = value;
  return submit_locked(*s, std::move(it));
}

CUresult launch_host_func(CUstream h, CUhostFn fn, void* data, bool ptsz) {
  return on_stream(h, ptsz, fn != nullptr, [&](const StreamP& s) {
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
  return create_handle(&Sim::streams, ph,
                       [&] { return std::make_shared<Stream>(Stream::Created, S().next_stream_id++, flags); });
}

CUresult stream_destroy(CUstream h) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  {
    Lock lk(g.mu);
    auto it = g.streams.find(h);
    if (h == nullptr || it == g.streams.end()) {
      lk.unlock();
      return finish(CUDA_ERROR_INVALID_HANDLE);
    }
    StreamP s = it->second;
    g.streams.erase(it);
    if (s->capturing) end_capture_locked(*s);
    wait_stream_locked(lk, s);
    stop_worker(lk, *s);
  }
  return finish(CUDA_SUCCESS);
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

// ---- events

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
  r = create_handle(&Sim::events, phEvent, [&] { return std::make_unique<Event>(Event{nullptr, 0, Flags}); });
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

SIM_API CUresult cuEventQuery(CUevent hEvent) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Sim& g = S();
  {
    Lock lk(g.mu);
    const Event* e = find_locked(&Sim::events, hEvent);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    const Event& E = *e;
    r = (E.s && E.s->done < E.seq) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
    if (!g.dead) return r;
  }
  return sticky_result();  // the fault happened while we looked
}

SIM_API CUresult cuEventSynchronize(CUevent hEvent) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(S().mu);
    const Event* e = find_locked(&Sim::events, hEvent);
    if (e == nullptr) {
      r = CUDA_ERROR_INVALID_HANDLE;
    } else if (e->s) {
      StreamP s = e->s;
      uint64_t seq = e->seq;
      wait_stream_locked(lk, s, seq);
    }
  }
  return finish(r);
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
  return launch_host_func(hStream, fn, userData, false);
}
SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, true);
}
