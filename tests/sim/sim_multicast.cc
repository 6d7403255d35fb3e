// cdsa simulated CUDA driver (tests only): physical allocations (cuMemCreate) and multicast objects, far enough to
// check that every argument of the multicast binds arrives where its prototype puts it. CUDA 13.1 inserted a
// CUdevice as the second parameter of cuMulticastBindMem_v2/cuMulticastBindAddr_v2: a caller holding the 12.1
// prototype shifts every later argument by one, which these checks refuse (tests/sim/README.md, "Multicast").
// No memory is mapped or shared: a bind is a record (device, offset, size) that cuMulticastUnbind must name again.

#include <map>
#include <vector>

#include "sim_internal.h"

namespace sim {
namespace {

// The granularity cuMulticastGetGranularity answers (both MINIMUM and RECOMMENDED): 2 MiB, what an H100/H200
// reports (*assumed*: the GPU suite prints the real one).
constexpr size_t kGranularity = size_t{2} << 20;

struct Allocation {
  size_t size;
  int device;
};
struct Bind {
  int device;
  size_t mc_offset, size;
};
struct Multicast {
  size_t size;
  unsigned num_devices;
  std::vector<int> devices;  // added with cuMulticastAddDevice
  std::vector<Bind> binds;
};

struct MulticastState {
  std::mutex mu;
  CUmemGenericAllocationHandle next = 0x1000;
  std::map<CUmemGenericAllocationHandle, Allocation> allocations;
  std::map<CUmemGenericAllocationHandle, Multicast> objects;
};
MulticastState& M() {
  static auto* m = new MulticastState;  // never destroyed: exit handlers may call in
  return *m;
}

bool aligned(size_t v) { return v % kGranularity == 0; }

// Whether `dev` was added to `mc` (cuda.h: "the device named by dev must have been added to the multicast team").
bool in_team(const Multicast& mc, CUdevice dev) {
  for (int d : mc.devices)
    if (d == dev) return true;
  return false;
}

// What every bind checks, for the device it applies to (v1: every device of the team; v2: `dev`): cuda.h's rules
// for the multicast range; the memory side is checked by the caller.
CUresult check_bind_locked(CUmemGenericAllocationHandle mc_handle, const CUdevice* dev, size_t mc_offset, size_t size,
                           unsigned long long flags, Multicast** out) {
  auto it = M().objects.find(mc_handle);
  if (it == M().objects.end()) return CUDA_ERROR_INVALID_VALUE;
  Multicast& mc = it->second;
  if (dev == nullptr && mc.devices.empty()) return CUDA_ERROR_INVALID_VALUE;  // no device to bind for
  if (dev != nullptr) {
    if (*dev < 0 || *dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    if (!in_team(mc, *dev)) return CUDA_ERROR_INVALID_DEVICE;
  }
  // "Flags for future use, must be zero for now."
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0 || !aligned(size) || !aligned(mc_offset) || mc_offset > mc.size || size > mc.size - mc_offset)
    return CUDA_ERROR_INVALID_VALUE;
  *out = &mc;
  return CUDA_SUCCESS;
}

void add_binds_locked(Multicast& mc, const CUdevice* dev, size_t mc_offset, size_t size) {
  if (dev != nullptr)
    mc.binds.push_back({*dev, mc_offset, size});
  else
    for (int d : mc.devices) mc.binds.push_back({d, mc_offset, size});
}

CUresult bind_mem(CUmemGenericAllocationHandle mc_handle, const CUdevice* dev, size_t mc_offset,
                  CUmemGenericAllocationHandle mem_handle, size_t mem_offset, size_t size, unsigned long long flags) {
  if (CUresult r = enter(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lk(M().mu);
  Multicast* mc = nullptr;
  if (CUresult r = check_bind_locked(mc_handle, dev, mc_offset, size, flags, &mc); r != CUDA_SUCCESS) return r;
  auto a = M().allocations.find(mem_handle);
  if (a == M().allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  // "The size + memOffset cannot be larger than the size of the allocated memory."
  if (!aligned(mem_offset) || mem_offset > a->second.size || size > a->second.size - mem_offset)
    return CUDA_ERROR_INVALID_VALUE;
  // "For device memory ... the memory allocation must have been created on the device specified by dev."
  if (dev != nullptr && a->second.device != *dev) return CUDA_ERROR_INVALID_DEVICE;
  add_binds_locked(*mc, dev, mc_offset, size);
  return CUDA_SUCCESS;
}

CUresult bind_addr(CUmemGenericAllocationHandle mc_handle, const CUdevice* dev, size_t mc_offset, CUdeviceptr memptr,
                   size_t size, unsigned long long flags) {
  if (CUresult r = enter(); r != CUDA_SUCCESS) return r;
  {
    // The memory: a cuMemAlloc block holding [memptr, memptr + size) (*assumed*: the real driver wants memory
    // mapped with cuMemMap; the sim has no virtual memory management).
    Lock lk(S().mu);
    if (memptr == 0 || !in_range(S().allocs, static_cast<uintptr_t>(memptr), size)) return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> lk(M().mu);
  Multicast* mc = nullptr;
  if (CUresult r = check_bind_locked(mc_handle, dev, mc_offset, size, flags, &mc); r != CUDA_SUCCESS) return r;
  add_binds_locked(*mc, dev, mc_offset, size);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace sim

using namespace sim;

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
  if (CUresult r = enter(); r != CUDA_SUCCESS) return r;
  if (handle == nullptr || prop == nullptr || size == 0 || !aligned(size) || flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (prop->location.id < 0 || prop->location.id >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(M().mu);
  *handle = M().next++;
  M().allocations[*handle] = {size, prop->location.id};
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lk(M().mu);
  if (M().allocations.erase(handle) == 0 && M().objects.erase(handle) == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMulticastGetGranularity(size_t* granularity, const CUmulticastObjectProp* prop,
                                           CUmulticastGranularity_flags option) {
  if (CUresult r = enter(); r != CUDA_SUCCESS) return r;
  if (granularity == nullptr || prop == nullptr ||
      (option != CU_MULTICAST_GRANULARITY_MINIMUM && option != CU_MULTICAST_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMulticastCreate(CUmemGenericAllocationHandle* mcHandle, const CUmulticastObjectProp* prop) {
  if (CUresult r = enter(); r != CUDA_SUCCESS) return r;
  if (mcHandle == nullptr || prop == nullptr || prop->numDevices == 0 ||
      prop->numDevices > static_cast<unsigned>(device_count()) || prop->size == 0 || !aligned(prop->size) ||
      prop->flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(M().mu);
  *mcHandle = M().next++;
  M().objects[*mcHandle] = {prop->size, prop->numDevices, {}, {}};
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev) {
  if (CUresult r = enter(); r != CUDA_SUCCESS) return r;
  if (dev < 0 || dev >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(M().mu);
  auto it = M().objects.find(mcHandle);
  if (it == M().objects.end()) return CUDA_ERROR_INVALID_VALUE;
  Multicast& mc = it->second;
  if (in_team(mc, dev)) return CUDA_SUCCESS;
  if (mc.devices.size() >= mc.num_devices) return CUDA_ERROR_INVALID_VALUE;  // more than numDevices
  mc.devices.push_back(dev);
  return CUDA_SUCCESS;
}

// The 12.1 prototypes: the bind is for every device of the team.
SIM_API CUresult cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                    CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                                    unsigned long long flags) {
  return bind_mem(mcHandle, nullptr, mcOffset, memHandle, memOffset, size, flags);
}
SIM_API CUresult cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset, CUdeviceptr memptr,
                                     size_t size, unsigned long long flags) {
  return bind_addr(mcHandle, nullptr, mcOffset, memptr, size, flags);
}

#if CUDA_VERSION >= 13010
// The 13.1 prototypes: "The binding will be applicable for the device dev."
SIM_API CUresult cuMulticastBindMem_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                                       CUmemGenericAllocationHandle memHandle, size_t memOffset, size_t size,
                                       unsigned long long flags) {
  return bind_mem(mcHandle, &dev, mcOffset, memHandle, memOffset, size, flags);
}
SIM_API CUresult cuMulticastBindAddr_v2(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset,
                                        CUdeviceptr memptr, size_t size, unsigned long long flags) {
  return bind_addr(mcHandle, &dev, mcOffset, memptr, size, flags);
}
#endif

// Unbinds what a bind for `dev` at exactly (mcOffset, size) made; anything else -> CUDA_ERROR_INVALID_VALUE
// (*assumed*: cuda.h asks for the same device, offset and size as the bind, but does not name the error).
SIM_API CUresult cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev, size_t mcOffset, size_t size) {
  if (CUresult r = enter(); r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lk(M().mu);
  auto it = M().objects.find(mcHandle);
  if (it == M().objects.end()) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Bind>& binds = it->second.binds;
  for (auto b = binds.begin(); b != binds.end(); ++b) {
    if (b->device == dev && b->mc_offset == mcOffset && b->size == size) {
      binds.erase(b);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}
