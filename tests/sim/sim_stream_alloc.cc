// cdsa simulated CUDA driver (tests only): stream-ordered allocation, cuMemAllocAsync / cuMemFreeAsync, in the
// least the oracle (tests/oracle) needs: a block freed in stream order while work that uses it is still queued, so
// a stream memory operation that runs after the free faults (700) although nothing recorded a launch for it
// (issue 26, item 3). See README.md for the contract and sim_internal.h for the shared state.
//
// cuMemAllocAsync allocates at once (a cuMemAlloc block: usable in stream order, and earlier, which no correct
// program can tell). cuMemFreeAsync queues the free on the stream: until that item runs the block stays valid (a
// memop naming it is accepted), once it has run the block is gone (a memop queued before that faults when it runs:
// the worker checks its target, sim_streams.cc; one submitted after is refused). The block's memory is never given
// back to the heap, so a stream-ordered copy that still touches it cannot corrupt the sim.

#include "sim_internal.h"

namespace sim {
namespace {

// The free, run on the stream's worker as a host function (no lock held there).
void free_block(void* p) {
  Lock lk(S().mu);
  S().allocs.erase(reinterpret_cast<uintptr_t>(p));
}

CUresult alloc_async(CUdeviceptr* dptr, size_t bytesize, CUstream h, bool ptsz) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  {
    Lock lk(S().mu);
    StreamP s;
    if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  }
  return cuMemAlloc_v2(dptr, bytesize);
}

CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptsz) {
  return on_stream(h, ptsz, dptr != 0, [&](const StreamP& s) {
    if (!S().allocs.count(dptr)) return CUDA_ERROR_INVALID_VALUE;
    Item it;
    it.kind = Item::HostFn;
    it.fn = free_block;
    it.dst = reinterpret_cast<void*>(dptr);
    return submit_locked(*s, std::move(it));
  });
}

}  // namespace
}  // namespace sim

using namespace sim;

SIM_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream, false);
}
SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream, true);
}
SIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, false); }
SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, true); }
