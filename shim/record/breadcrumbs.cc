#include "shim/record/breadcrumbs.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <mutex>

#include "base/check.h"
#include "shim/common/config.h"
#include "shim/record/assert_capture.h"
#include "shim/common/driver.h"
#include "shim/common/log.h"
#include "shim/record/recorder.h"
#include "shim/record/stream_order.h"

namespace cdsa {
namespace breadcrumbs_internal {
std::atomic<int> g_state{kUntried};
}  // namespace breadcrumbs_internal
namespace {

using namespace breadcrumbs_internal;
std::mutex g_init_mutex;  // warm-up only
uint64_t* g_slots = nullptr;
CUdeviceptr g_dptr = 0;
size_t g_bytes = 0;
std::atomic<bool> g_32bit{false};

// Attribute 122 of the current context's device; true when it cannot be read (the 64-bit write then says).
bool can_use_64bit(const Driver& d) {
  if (!d.StreamWriteValue64) return false;
  CUdevice dev = 0;
  int value = 1;
  if (d.CtxGetDevice && d.DeviceGetAttribute && d.CtxGetDevice(&dev) == CUDA_SUCCESS &&
      d.DeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) == CUDA_SUCCESS)
    return value != 0;
  return true;
}

}  // namespace

bool breadcrumbs_internal::init_slow(const InCdsa&) noexcept {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  int s = g_state.load(std::memory_order_acquire);
  if (s != kUntried) return s == kActive;
  const Driver& d = driver();
  if (!config().breadcrumbs) {
    g_state.store(kDisabled, std::memory_order_release);
    return false;
  }
  if ((!d.StreamWriteValue64 && !d.StreamWriteValue32) || !d.MemHostRegister || !d.MemHostGetDevicePointer) {
    log_line("the driver has no stream memory operations: attribution will list candidates only");
    g_state.store(kDisabled, std::memory_order_release);
    return false;
  }
  if (!g_slots) {
    g_bytes = stream_capacity() * sizeof(uint64_t);
    void* p = mmap(nullptr, g_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      log_line("could not map breadcrumb memory: attribution will list candidates only");
      g_state.store(kDisabled, std::memory_order_release);
      return false;
    }
    g_slots = static_cast<uint64_t*>(p);
  }
  // Registration is not allowed while this thread's stream captures in global mode: relax the mode.
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (d.ThreadExchangeStreamCaptureMode) d.ThreadExchangeStreamCaptureMode(&mode);
  CUresult r = d.MemHostRegister(g_slots, g_bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r == CUDA_SUCCESS) r = d.MemHostGetDevicePointer(&g_dptr, g_slots, 0);
  if (d.ThreadExchangeStreamCaptureMode) d.ThreadExchangeStreamCaptureMode(&mode);
  if (r != CUDA_SUCCESS) {
    // No context yet, a capture in progress, or a context that already died: try again on a later call.
    if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ||
        r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_INITIALIZED || is_sticky_fault(r))
      return false;
    const char* name = nullptr;
    if (d.GetErrorName) d.GetErrorName(r, &name);
    log_line("could not register breadcrumb memory (%s): attribution will list candidates only",
             name ? name : "unknown error");
    g_state.store(kDisabled, std::memory_order_release);
    return false;
  }
  bool narrow = !can_use_64bit(d);
  if (narrow && !d.StreamWriteValue32) {
    log_line(
        "the device has no 64-bit stream memory operations and the driver no 32-bit ones: attribution will "
        "list candidates only");
    g_state.store(kDisabled, std::memory_order_release);
    return false;
  }
  g_32bit.store(narrow, std::memory_order_relaxed);
  g_state.store(kActive, std::memory_order_release);
  return true;
}

bool breadcrumbs_32bit() noexcept { return g_32bit.load(std::memory_order_relaxed); }


CUresult enqueue_breadcrumb(const InCdsa&, CUstream stream, int slot, uint64_t stream_seq) noexcept {
  if (slot < 0 || g_state.load(std::memory_order_relaxed) != kActive) return CUDA_SUCCESS;
  CUdeviceptr at = g_dptr + static_cast<CUdeviceptr>(slot) * sizeof(uint64_t);
  // 32-bit marks go to the slot's low word (both CUDA hosts, x86-64 and aarch64, are little-endian).
  CUresult r =
      g_32bit.load(std::memory_order_relaxed)
          ? driver().StreamWriteValue32(stream, at, static_cast<cuuint32_t>(stream_seq), CU_STREAM_WRITE_VALUE_DEFAULT)
          : driver().StreamWriteValue64(stream, at, stream_seq, CU_STREAM_WRITE_VALUE_DEFAULT);
  // The mark met a sticky fault (the context died before it could be queued): the driver may have printed the
  // device's assert text into this call. Keep it for the report, which the program's next call will trigger.
  if (__builtin_expect(is_sticky_fault(r), 0)) keep_device_text(captured_driver_stderr());
  if (r != CUDA_SUCCESS && !is_sticky_fault(r)) {
    // One failed write loses one mark (its launches join the next mark's group), never the process's breadcrumbs.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      const char* name = nullptr;
      if (driver().GetErrorName) driver().GetErrorName(r, &name);
      log_line("a breadcrumb write failed (%s): that launch has no completion mark of its own (later marks still cover it)",
               name ? name : "unknown error");
    }
  }
  return r;
}

namespace {

// StreamState::pdl_event while a thread uses the event: whoever takes it holds it alone, and gives it back (or, when
// a teardown dropped it meanwhile, destroys it).
constexpr uintptr_t kEventHeld = 1;

// The stream's event for PDL proofs, taken for this call (made in the current context when there is none);
// null when none can be had (another thread holds it, or it cannot be made).
CUevent take_pdl_event(StreamState* st) {
  const Driver& d = driver();
  uintptr_t v = st->pdl_event.exchange(kEventHeld, std::memory_order_acq_rel);
  if (v == kEventHeld) return nullptr;  // another thread holds it: it stays marked held, for that thread
  if (v != 0) return reinterpret_cast<CUevent>(v);
  CUevent ev = nullptr;
  if (d.EventCreate && d.EventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS && ev) return ev;
  uintptr_t expected = kEventHeld;
  st->pdl_event.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  return nullptr;
}

// Gives the event back (`keep`), or destroys it: refused by the stream (another context's), or dropped by a
// teardown while it was held.
void give_back_pdl_event(StreamState* st, CUevent ev, bool keep) {
  uintptr_t expected = kEventHeld;
  if (keep &&
      st->pdl_event.compare_exchange_strong(expected, reinterpret_cast<uintptr_t>(ev), std::memory_order_acq_rel))
    return;
  if (!keep) {
    expected = kEventHeld;
    st->pdl_event.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
  }
  if (driver().EventDestroy) driver().EventDestroy(ev);
}

// Before the mark of a group that holds a PDL launch: an event recorded on the stream "captures the contents of
// hStream" and cuStreamWaitEvent makes later work "wait for all work captured" (cuda.h), so the mark enqueued after
// the wait lands only once every launch before it finished, the primaries included. True when the wait is in.
bool wait_for_the_whole_group(CUstream stream, StreamState* st) {
  const Driver& d = driver();
  if (!d.EventRecord || !d.StreamWaitEvent) return false;
  CUevent ev = take_pdl_event(st);
  if (!ev) return false;
  CUresult r = d.EventRecord(ev, stream);
  bool waited = r == CUDA_SUCCESS && d.StreamWaitEvent(stream, ev, CU_EVENT_WAIT_DEFAULT) == CUDA_SUCCESS;
  // An event of another context than the stream's ("must be from the same context", cuda.h) is destroyed, so the
  // next group makes one in the context current then (its own context is alive: every event was made after the
  // last teardown).
  give_back_pdl_event(st, ev, !(r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_CONTEXT));
  return waited;
}

// Places the mark of launch `seq` on `stream`: behind the wait when its group holds a PDL launch, or not at all
// when that wait cannot be placed (its launches then join the next mark's group). `own_call`: the launch's own call,
// right after it (a sticky answer then counts as placed: the context died that very instant).
CUresult place(const InCdsa& guard, CUstream stream, StreamState* st, int slot, uint64_t seq, bool own_call) {
  CDSA_DCHECK(seq != 0 && seq <= st->launched.load(std::memory_order_acquire));
  const uint64_t before = st->breadcrumb_launched.load(std::memory_order_acquire);
  // A newer mark is placed already (a racing thread's): it covers this one, and this number written after it would
  // lower the slot.
  if (seq <= before) return CUDA_SUCCESS;
  const uint64_t pdl = st->pdl_last.load(std::memory_order_acquire);
  CDSA_DCHECK(pdl <= st->launched.load(std::memory_order_acquire));
  // The proof every landed mark rests on (breadcrumbs.h): a mark whose group holds a PDL launch goes out only
  // behind the wait on the whole group.
  const bool covers_pdl = !kLandedPdlMarkProvesPrimary && pdl > before;
  bool waited = false;
  if (covers_pdl && breadcrumbs_active() && !(waited = wait_for_the_whole_group(stream, st))) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      log_line(
          "a completion mark after a programmatic dependent launch could not be placed behind its event wait: "
          "it is left out, and its launches share the next mark placed on that stream");
    return CUDA_SUCCESS;
  }
  CDSA_DCHECK(!covers_pdl || waited || !breadcrumbs_active());
  CUresult r = enqueue_breadcrumb(guard, stream, slot, seq);
  // A sticky answer means the context died before the mark could be queued: no later mark can land either. In the
  // launch's own call that is as good as a placed mark that never landed; later, the launch may have finished long
  // before, so the mark is not placed (a mark never placed proves nothing).
  if (r == CUDA_SUCCESS || (own_call && is_sticky_fault(r))) raise_to(st->breadcrumb_launched, seq);
  CDSA_DCHECK(st->breadcrumb_launched.load(std::memory_order_acquire) >= before);
  CDSA_DCHECK(st->breadcrumb_launched.load(std::memory_order_acquire) <= st->launched.load(std::memory_order_acquire));
  return r;
}

}  // namespace

CUresult settle_breadcrumb(const InCdsa& guard, CUstream stream, int slot, bool fold) noexcept {
  return settle_breadcrumb(guard, stream, stream_state(slot), slot, fold);
}

CUresult settle_breadcrumb(const InCdsa& guard, CUstream stream, StreamState* st, int slot, bool fold) noexcept {
  if (!st || st->deferred.load(std::memory_order_relaxed) == 0) return CUDA_SUCCESS;
  // From taking the mark off the stream until its enqueue returned: a region of the stream's order
  // (shim/record/stream_order.h), part of this thread's launch or op when it holds one on the stream.
  StreamRegion region(st);
  const uint64_t seq = st->deferred.exchange(0, std::memory_order_acq_rel);
  if (seq == 0 || fold) return CUDA_SUCCESS;  // folded: the PDL launch's own mark will cover this one
  return place(guard, stream, st, slot, seq, /*own_call=*/false);
}

CUresult place_breadcrumb_now(const InCdsa& guard, CUstream stream, StreamState* st, int slot,
                              uint64_t stream_seq) noexcept {
  if (!st) return CUDA_SUCCESS;
  st->deferred.exchange(0, std::memory_order_acq_rel);  // an older launch's, still deferred: this mark covers it
  return place(guard, stream, st, slot, stream_seq, /*own_call=*/true);
}

void note_stream_synced(StreamState* st, uint64_t stream_seq, uint64_t ops) noexcept {
  if (!st) return;
  CDSA_DCHECK(stream_seq <= st->launched.load(std::memory_order_acquire));
  CDSA_DCHECK(ops <= st->ops.load(std::memory_order_acquire));
  if (stream_seq) raise_to(st->synced, stream_seq);
  if (ops) raise_to(st->ops_synced, ops);
}

void flush_all_breadcrumbs(const InCdsa& guard) noexcept {
  if (!breadcrumbs_active()) return;
  const Driver& d = driver();
  CUcontext here = nullptr;
  bool know_here = d.CtxGetCurrent && d.CtxGetCurrent(&here) == CUDA_SUCCESS;
  const auto me = static_cast<uint32_t>(syscall(SYS_gettid));
  for (uint32_t i = 0; i < stream_capacity(); ++i) {
    StreamState* st = stream_state(static_cast<int>(i));
    if (!st) break;
    if (st->id.load(std::memory_order_acquire) == 0 || st->deferred.load(std::memory_order_acquire) == 0) continue;
    auto h = reinterpret_cast<CUstream>(st->last_handle.load(std::memory_order_relaxed));
    auto ctx = reinterpret_cast<CUcontext>(st->last_ctx.load(std::memory_order_relaxed));
    const bool by_ctx = context_relative_stream(h);
    if (h == CU_STREAM_PER_THREAD && st->last_tid.load(std::memory_order_relaxed) != me) continue;
    // The NULL / legacy stream is the current context's: place its mark in the context it belongs to.
    // A thread that cannot name its context (a dead one answers with the sticky error) tries anyway: the write then
    // fails with that error, and the launch stays a candidate, as its mark can never land.
    bool switched = by_ctx && know_here && ctx && ctx != here && d.CtxSetCurrent && d.CtxSetCurrent(ctx) == CUDA_SUCCESS;
    if (by_ctx && know_here && !switched && ctx != here) continue;
    settle_breadcrumb(guard, h, static_cast<int>(i), false);
    if (switched) d.CtxSetCurrent(here);
  }
}

void destroy_pdl_events() noexcept {
  for (uint32_t i = 0; i < stream_capacity(); ++i) {
    if (!stream_state(static_cast<int>(i))) break;
    destroy_stream_pdl_event(static_cast<int>(i));
  }
}

void destroy_stream_pdl_event(int slot) noexcept {
  StreamState* st = stream_state(slot);
  if (!st) return;
  uintptr_t v = st->pdl_event.exchange(0, std::memory_order_acq_rel);
  // Held by a thread just now: that thread destroys it when it gives it back (give_back_pdl_event).
  if (v != 0 && v != kEventHeld && driver().EventDestroy) driver().EventDestroy(reinterpret_cast<CUevent>(v));
}

uint64_t breadcrumb_landed(int slot, uint64_t launched) noexcept {
  if (slot < 0 || !g_slots) return 0;
  if (!g_32bit.load(std::memory_order_relaxed)) return __atomic_load_n(&g_slots[slot], __ATOMIC_ACQUIRE);
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "32-bit marks are written to the slot's low word");
  uint32_t low = __atomic_load_n(reinterpret_cast<uint32_t*>(&g_slots[slot]), __ATOMIC_ACQUIRE);
  return widen_mark(low, launched);
}

}  // namespace cdsa
