#include "shim/breadcrumbs.h"

#include <sys/mman.h>
#include <atomic>
#include <mutex>

#include "shim/config.h"
#include "shim/driver.h"
#include "shim/log.h"
#include "shim/recorder.h"

namespace cdsa {
namespace {

enum State : int { kUntried = 0, kActive = 1, kDisabled = 2 };
std::atomic<int> g_state{kUntried};
std::mutex g_init_mutex;  // warm-up only
uint64_t* g_slots = nullptr;
CUdeviceptr g_dptr = 0;
size_t g_bytes = 0;

}  // namespace

bool breadcrumbs_init(const InCdsa&) noexcept {
  int s = g_state.load(std::memory_order_acquire);
  if (s != kUntried) return s == kActive;
  std::lock_guard<std::mutex> lock(g_init_mutex);
  s = g_state.load(std::memory_order_acquire);
  if (s != kUntried) return s == kActive;
  const Driver& d = driver();
  if (!config().breadcrumbs) {
    g_state.store(kDisabled, std::memory_order_release);
    return false;
  }
  if (!d.StreamWriteValue64 || !d.MemHostRegister || !d.MemHostGetDevicePointer) {
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
  g_state.store(kActive, std::memory_order_release);
  return true;
}

bool breadcrumbs_active() noexcept { return g_state.load(std::memory_order_acquire) == kActive; }

CUresult enqueue_breadcrumb(const InCdsa&, CUstream stream, int slot, uint64_t stream_seq) noexcept {
  if (slot < 0 || g_state.load(std::memory_order_relaxed) != kActive) return CUDA_SUCCESS;
  CUresult r = driver().StreamWriteValue64(stream, g_dptr + static_cast<CUdeviceptr>(slot) * sizeof(uint64_t),
                                           stream_seq, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS && !is_sticky_fault(r)) {
    int expected = kActive;
    if (g_state.compare_exchange_strong(expected, kDisabled)) {
      const char* name = nullptr;
      if (driver().GetErrorName) driver().GetErrorName(r, &name);
      log_line("a breadcrumb write failed (%s): breadcrumbs are off from here on", name ? name : "unknown error");
    }
  }
  return r;
}

uint64_t breadcrumb_landed(int slot) noexcept {
  if (slot < 0 || !g_slots) return 0;
  return __atomic_load_n(&g_slots[slot], __ATOMIC_ACQUIRE);
}

}  // namespace cdsa
