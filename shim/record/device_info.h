// The GPU behind each context cdsa saw launches on: ordinal, name and PCI bus id, asked of the driver while the
// context is alive (a stream's first launch), so a report made after the fault can name the GPU (to match the
// kernel's Xid lines) without asking a dead context.
//
// Contract: `note_context_device` is called on the launch path's cache-miss branch (a stream seen for the first
// time): a lookup in a fixed table of kMaxDevices entries; the first sighting of a context asks the driver three
// calls (cuCtxGetDevice_v2 of that context, else cuCtxGetDevice when it is the current one; cuDeviceGetName,
// cuDeviceGetPCIBusId) and publishes the entry. No lock, no allocation.
// `context_device` may be called from any thread.
#pragma once

#include <cuda.h>
#include <cstdint>

#include "shim/common/reentrancy.h"

namespace cdsa {

struct DeviceInfo {
  int ordinal = -1;        // the CUdevice (relative to CUDA_VISIBLE_DEVICES)
  char name[96] = {0};     // cuDeviceGetName; "" when refused
  char pci_bus_id[32] = {0};  // cuDeviceGetPCIBusId, e.g. "0000:3B:00.0"; "" when refused
};

// `ctx`: the context whose id is `ctx_id` (the stream's, not necessarily the current one).
void note_context_device(const InCdsa&, uint32_t ctx_id, CUcontext ctx) noexcept;
// The device of context `ctx_id`; with ctx_id 0 (or unknown), the first device noted. False when none was noted.
bool context_device(uint32_t ctx_id, DeviceInfo* out) noexcept;

}  // namespace cdsa
