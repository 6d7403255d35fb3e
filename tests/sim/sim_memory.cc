// cdsa simulated CUDA driver (tests only): Memory: allocations, registrations, synchronous and asynchronous copies and
// memsets. See README.md for the contract and sim_internal.h for the shared state.

#include "sim_internal.h"

namespace sim {

bool in_range(const std::map<uintptr_t, size_t>& m, uintptr_t p, size_t n) {
  auto it = m.upper_bound(p);
  if (it == m.begin()) return false;
  --it;
  return p >= it->first && n <= it->second && p - it->first <= it->second - n;
}

bool memop_target_ok_locked(uintptr_t p, size_t n) {
  return in_range(S().registered, p, n) || in_range(S().allocs, p, n);
}

void fill_memory(void* dst, uint64_t value, size_t n, bool is32) {
  if (!is32) {
    memset(dst, static_cast<unsigned char>(value), n);
    return;
  }
  auto v = static_cast<uint32_t>(value);
  auto* p = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; ++i) memcpy(p + 4 * i, &v, 4);
}

// Synchronous copies and memsets wait for the current context's streams (none current: every stream) and answer its
// state; memory itself is not per context.
CUresult memcpy_sync(void* dst, const void* src, size_t n) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (CUresult r = synchronize_ctx(t_current); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  memcpy(dst, src, n);
  return CUDA_SUCCESS;
}

namespace {
// Queues a copy or memset of `it.n` bytes/elements on stream `h`, as the driver checks it: the stream first (and its
// context's sticky error), then n == 0 (nothing to do), then `valid` (the addresses).
CUresult enqueue_plain(CUstream h, bool ptsz, bool valid, const Item& it) {
  return on_stream(h, ptsz, true, [&](const StreamP& s) -> CUresult {
    if (it.n == 0) return CUDA_SUCCESS;
    if (!valid) return CUDA_ERROR_INVALID_VALUE;
    return submit_locked(*s, Item(it));
  });
}
}  // namespace

CUresult memcpy_async(void* dst, const void* src, size_t n, CUstream h, bool ptsz) {
  Item it;
  it.kind = Item::Copy;
  it.dst = dst;
  it.src = src;
  it.n = n;
  return enqueue_plain(h, ptsz, dst != nullptr && src != nullptr, it);
}

// Synchronous memset: waits for all streams, then fills.
CUresult memset_sync(CUdeviceptr dst, uint64_t value, size_t n, bool is32) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  if (CUresult r = synchronize_ctx(t_current); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == 0 || (is32 && dst % 4 != 0)) return CUDA_ERROR_INVALID_VALUE;
  fill_memory(reinterpret_cast<void*>(dst), value, n, is32);
  return CUDA_SUCCESS;
}

CUresult memset_async(CUdeviceptr dst, uint64_t value, size_t n, bool is32, CUstream h, bool ptsz) {
  Item it;
  it.kind = is32 ? Item::Memset32 : Item::Memset8;
  it.dst = reinterpret_cast<void*>(dst);
  it.value = value;
  it.n = n;
  return enqueue_plain(h, ptsz, dst != 0 && !(is32 && dst % 4 != 0), it);
}

}  // namespace sim

using namespace sim;

// ---- memory

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t rounded = (bytesize + 255) & ~size_t{255};
  if (rounded < bytesize) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = nullptr;
  if (posix_memalign(&p, 256, rounded) != 0 || p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(p, 0, rounded);
  {
    Lock lk(S().mu);
    S().allocs[reinterpret_cast<uintptr_t>(p)] = bytesize;
  }
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  if (dptr == 0) return finish(CUDA_SUCCESS);
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  bool found = false;
  {
    Lock lk(g.mu);
    if (g.allocs.count(dptr)) {
      found = true;
      wait_all_locked(lk);  // queued work may still use it
      g.allocs.erase(dptr);
    } else {
      r = CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (found) free(reinterpret_cast<void*>(dptr));
  return finish(r);
}

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount);
}
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount);
}
SIM_API CUresult cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return memcpy_sync(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount);
}
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  return memcpy_sync(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount);
}

SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount,
                                           CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dstDevice), srcHost, ByteCount, hStream, true);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return memcpy_async(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
  return memcpy_async(dstHost, reinterpret_cast<const void*>(srcDevice), ByteCount, hStream, true);
}

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
}
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount);
}
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount);
}
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  return memcpy_sync(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount);
}
SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount, hStream, false);
}
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), ByteCount, hStream, true);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount, hStream,
                      false);
}
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream) {
  return memcpy_async(reinterpret_cast<void*>(dstDevice), reinterpret_cast<const void*>(srcDevice), ByteCount, hStream,
                      true);
}

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return memset_sync(dstDevice, uc, N, false);
}
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  return memset_sync(dstDevice, uc, N, false);
}
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return memset_sync(dstDevice, ui, N, true);
}
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  return memset_sync(dstDevice, ui, N, true);
}
SIM_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return memset_async(dstDevice, uc, N, false, hStream, false);
}
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return memset_async(dstDevice, uc, N, false, hStream, true);
}
SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return memset_async(dstDevice, ui, N, true, hStream, false);
}
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return memset_async(dstDevice, ui, N, true, hStream, true);
}

SIM_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t kTotal = size_t{80} << 30;
  size_t used = 0;
  Lock lk(S().mu);
  for (auto& [p, n] : S().allocs) used += n;
  *total = kTotal;
  *free = used < kTotal ? kTotal - used : 0;
  return CUDA_SUCCESS;
}

namespace {
CUresult host_register(void* p, size_t bytesize, unsigned flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~0xFu) return CUDA_ERROR_INVALID_VALUE;
  auto b = reinterpret_cast<uintptr_t>(p);
  if (b + bytesize < b) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  auto next = g.registered.lower_bound(b);
  if (next != g.registered.end() && next->first < b + bytesize) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (next != g.registered.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > b) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  g.registered.emplace(b, bytesize);
  return CUDA_SUCCESS;
}
}  // namespace

SIM_API CUresult cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  return host_register(p, bytesize, Flags);
}
SIM_API CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostUnregister(void* p) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  {
    Lock lk(g.mu);
    auto b = reinterpret_cast<uintptr_t>(p);
    if (p == nullptr || !g.registered.count(b)) {
      r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    } else {
      wait_all_locked(lk);  // queued memops may still target it
      g.registered.erase(b);
    }
  }
  return finish(r);
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  auto b = reinterpret_cast<uintptr_t>(p);
  if (p == nullptr || !in_range(S().registered, b, 1)) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = static_cast<CUdeviceptr>(b);
  return CUDA_SUCCESS;
}
