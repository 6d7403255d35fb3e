#include "shim/record/device_info.h"

#include <atomic>
#include <cstring>

#include "shim/common/driver.h"

namespace cdsa {
namespace {

constexpr int kMaxDevices = 16;  // contexts per process with a device noted (one per GPU in practice)
struct Entry {
  std::atomic<uint32_t> state{0};  // 0 free, 1 being filled, 2 published
  uint32_t ctx_id = 0;
  DeviceInfo info;
};
Entry g_entries[kMaxDevices];

// The device of `ctx`: cuCtxGetDevice_v2 names it; without it (drivers before CUDA 13) cuCtxGetDevice answers for
// the current context only, so only when `ctx` is the current one (a stream of another context is left for later).
bool device_of(CUcontext ctx, CUdevice* dev) {
  const Driver& d = driver();
  if (!ctx) return false;  // a context the driver would not name: no guess
  if (d.CtxGetDeviceOf) return d.CtxGetDeviceOf(dev, ctx) == CUDA_SUCCESS;
  CUcontext here = nullptr;
  if (!d.CtxGetDevice || !d.CtxGetCurrent || d.CtxGetCurrent(&here) != CUDA_SUCCESS) return false;
  if (here != ctx) return false;
  return d.CtxGetDevice(dev) == CUDA_SUCCESS;
}

}  // namespace

void note_context_device(const InCdsa&, uint32_t ctx_id, CUcontext ctx) noexcept {
  for (auto& e : g_entries) {
    uint32_t s = e.state.load(std::memory_order_acquire);
    if (s == 2 && e.ctx_id == ctx_id) return;
    if (s == 1) continue;  // another thread is filling it (maybe for this context: a duplicate is harmless)
    if (s == 0) {
      uint32_t expected = 0;
      if (!e.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
      const Driver& d = driver();
      CUdevice dev = -1;
      if (!device_of(ctx, &dev)) {
        e.state.store(0, std::memory_order_release);  // no context yet: try again at a later launch
        return;
      }
      e.ctx_id = ctx_id;
      e.info.ordinal = dev;
      if (!d.DeviceGetName || d.DeviceGetName(e.info.name, sizeof e.info.name - 1, dev) != CUDA_SUCCESS)
        e.info.name[0] = 0;
      if (!d.DeviceGetPCIBusId ||
          d.DeviceGetPCIBusId(e.info.pci_bus_id, sizeof e.info.pci_bus_id - 1, dev) != CUDA_SUCCESS)
        e.info.pci_bus_id[0] = 0;
      e.state.store(2, std::memory_order_release);
      return;
    }
  }
}

bool context_device(uint32_t ctx_id, DeviceInfo* out) noexcept {
  const Entry* first = nullptr;
  for (const auto& e : g_entries) {
    if (e.state.load(std::memory_order_acquire) != 2) continue;
    if (!first) first = &e;
    if (ctx_id != 0 && e.ctx_id == ctx_id) {
      *out = e.info;
      return true;
    }
  }
  if (!first) return false;
  *out = first->info;
  return true;
}

}  // namespace cdsa
