// Unit test of the simulated CUDA driver: memory: copies, memsets, host functions (sim_memory.cc).
// Part of sim_test; the shared helpers are in sim_test_support.h.

#include "sim_test_support.h"

namespace sim_test {
namespace {

TEST_F(SimTest, SyncMemcpyWaitsForAllStreams) {
  CUstream s = stream();
  CUdeviceptr buf = alloc(8 * sizeof(float));
  ASSERT_EQ(k_sleep(k, s, 40000), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, s, reinterpret_cast<float*>(buf), 8, 7.0f), CUDA_SUCCESS);
  ASSERT_EQ(k_sleep(k, CU_STREAM_PER_THREAD, 30000), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, CU_STREAM_PER_THREAD, reinterpret_cast<float*>(buf), 4, 3.0f), CUDA_SUCCESS);
  float host[8] = {};
  ASSERT_EQ(cuMemcpyDtoH(host, buf, sizeof host), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(host[i], 7.0f);

  const float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(k_sleep(k, nullptr, 30000), CUDA_SUCCESS);  // legacy stream
  ASSERT_EQ(k_fill(k, nullptr, reinterpret_cast<float*>(buf), 8, -1.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(buf, src, sizeof src), CUDA_SUCCESS);  // after the fill
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(memcmp(reinterpret_cast<void*>(buf), src, sizeof src), 0);

  // Async copies run in stream order.
  float out[8] = {};
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync(buf, src, sizeof src, s), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, s, reinterpret_cast<float*>(buf), 2, 9.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync(out, buf, sizeof out, s), CUDA_SUCCESS);
  EXPECT_EQ(out[7], 0.0f);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 9.0f);
  EXPECT_EQ(out[1], 9.0f);
  EXPECT_EQ(out[2], 3.0f);
  EXPECT_EQ(out[7], 8.0f);
}

TEST_F(SimTest, CopiesMemsetsHostFunctionsAndContextStack) {
  CUstream s = stream();
  CUdeviceptr a = alloc(64), b = alloc(64);
  size_t free_mem = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo(&free_mem, &total), CUDA_SUCCESS);
  EXPECT_GT(total, free_mem);

  ASSERT_EQ(cuMemsetD32(a, 0x01020304u, 16), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD(b, a, 64), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint32_t*>(b)[15], 0x01020304u);
  ASSERT_EQ(cuMemsetD8(b, 0xab, 3), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(b)[2], 0xab);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(b)[3], 0x01);
  EXPECT_EQ(cuMemsetD32(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);

  // Async forms and host functions run in stream order.
  struct Probe {
    CUdeviceptr b;
    uint32_t seen = 0;
    std::atomic<int> calls{0};
  } probe{b};
  auto host_fn = [](void* p) {
    auto* pr = static_cast<Probe*>(p);
    pr->seen = reinterpret_cast<uint32_t*>(pr->b)[0];
    pr->calls.fetch_add(1);
  };
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32Async(a, 7, 16, s), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyAsync(b, a, 64, s), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc(s, host_fn, &probe), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(b, 0, 64, s), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 0);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 1);
  EXPECT_EQ(probe.seen, 7u);
  EXPECT_EQ(reinterpret_cast<uint32_t*>(b)[0], 0u);
  ASSERT_EQ(cuMemcpy(b, a, 64), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint32_t*>(b)[9], 7u);

  // Captured host functions and memsets replay.
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32Async(b, 5, 16, s), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc(s, host_fn, &probe), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 1);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 2);
  EXPECT_EQ(probe.seen, 5u);
  EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);

  // Context stack.
  CUcontext ctx = nullptr, popped = nullptr, cur = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent(ctx), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPopCurrent(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, ctx);
  ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx);
  std::thread([&] {
    CUcontext c = nullptr;
    EXPECT_EQ(cuCtxPopCurrent(&c), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxPushCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, ctx);
    EXPECT_EQ(cuCtxPopCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, nullptr);
  }).join();
}

// Stream-ordered allocation (sim_stream_alloc.cc): the free runs in stream order; a memop queued before it runs
// still names a valid block when submitted, and faults (700) when it runs after the free; one submitted after the
// free ran is refused.
SIM_CHILD_TEST(StreamOrderedFreeBeforeAQueuedMemop) {
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUstream s = child_stream();
  CUdeviceptr d = 0;
  CHILD_EQ(cuMemAllocAsync(&d, 64, s), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s, d, 1, 0), CUDA_SUCCESS);
  CHILD_EQ(cuMemFreeAsync(d, s), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  CHILD_EQ(load(reinterpret_cast<uint32_t*>(d)), 1u);
  CHILD_EQ(cuStreamWriteValue32(s, d, 2, 0), CUDA_ERROR_INVALID_VALUE);  // freed: refused at once
  CHILD_EQ(cuMemFreeAsync(d, s), CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr e = 0;
  CHILD_EQ(cuMemAllocAsync(&e, 64, nullptr), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(k, s, 100000), CUDA_SUCCESS);
  CHILD_EQ(cuMemFreeAsync(e, s), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s, e, 3, 0), CUDA_SUCCESS);  // still allocated when submitted
  CHILD_EQ(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  child_exit_ok();
}

#if CUDA_VERSION >= 13010
// CUDA 13.1's cuLaunchHostFunc_v2: the host call in stream order, as cuLaunchHostFunc; a syncMode cuda.h does not
// define is refused, so the fourth argument is seen to arrive.
TEST_F(SimTest, LaunchHostFuncV2RunsInStreamOrderAndChecksItsSyncMode) {
  CUstream s = stream();
  CUdeviceptr a = alloc(64);
  struct Probe {
    CUdeviceptr a;
    uint32_t seen = 0;
    std::atomic<int> calls{0};
  } probe{a};
  auto host_fn = [](void* p) {
    auto* pr = static_cast<Probe*>(p);
    pr->seen = reinterpret_cast<uint32_t*>(pr->a)[0];
    pr->calls.fetch_add(1);
  };
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32Async(a, 9, 16, s), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc_v2(s, host_fn, &probe, CU_HOST_TASK_SPINWAIT), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 0);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 1);
  EXPECT_EQ(probe.seen, 9u);
  EXPECT_EQ(cuLaunchHostFunc_v2(s, host_fn, &probe, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchHostFunc_v2(s, nullptr, &probe, CU_HOST_TASK_BLOCKING), CUDA_ERROR_INVALID_VALUE);
  using V2 = CUresult (*)(CUstream, CUhostFn, void*, unsigned int);
  auto ptsz = reinterpret_cast<V2>(sym("cuLaunchHostFunc_v2_ptsz"));
  ASSERT_NE(ptsz, nullptr);
  ASSERT_EQ(ptsz(CU_STREAM_PER_THREAD, host_fn, &probe, CU_HOST_TASK_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(probe.calls.load(), 2);
  EXPECT_EQ(ptsz(CU_STREAM_PER_THREAD, host_fn, &probe, 2), CUDA_ERROR_INVALID_VALUE);
}

// Multicast binds check every argument where its prototype puts it: CUDA 13.1's _v2 forms take the device second.
TEST_F(SimTest, MulticastBindsTakeTheirArgumentsWhereThePrototypeSaysAndUnbindNamesThemAgain) {
  size_t gran = 0;
  CUmulticastObjectProp mp = {};
  mp.numDevices = 1;
  mp.size = size_t{8} << 20;
  ASSERT_EQ(cuMulticastGetGranularity(&gran, &mp, CU_MULTICAST_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  ASSERT_EQ(gran, size_t{2} << 20);
  CUmemGenericAllocationHandle mc = 0, mem = 0;
  ASSERT_EQ(cuMulticastCreate(&mc, &mp), CUDA_SUCCESS);
  CUmemAllocationProp ap = {};
  ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.location.id = 0;
  ASSERT_EQ(cuMemCreate(&mem, 4 * gran, &ap, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindMem_v2(mc, 0, 0, mem, 0, gran, 0), CUDA_ERROR_INVALID_DEVICE);  // not in the team yet
  EXPECT_EQ(cuMulticastAddDevice(mc, 3), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);

  EXPECT_EQ(cuMulticastBindMem_v2(mc, 0, 2 * gran, mem, gran, gran, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastUnbind(mc, 0, gran, gran), CUDA_ERROR_INVALID_VALUE);  // not what was bound
  EXPECT_EQ(cuMulticastUnbind(mc, 0, 2 * gran, gran), CUDA_SUCCESS);
  // The 12.1 argument list in the 13.1 slots (what a wrapper of the old prototype would pass on): refused.
  EXPECT_NE(cuMulticastBindMem_v2(mc, static_cast<CUdevice>(2 * gran), mem, gran, gran, 0, 0), CUDA_SUCCESS);
  EXPECT_NE(cuMulticastBindMem_v2(mc, 0, mem, gran, gran, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindMem_v2(mc, 0, 0, mem, 0, gran, 1), CUDA_ERROR_INVALID_VALUE);         // flags
  EXPECT_EQ(cuMulticastBindMem_v2(mc, 0, 0, mem, 0, 8 * gran, 0), CUDA_ERROR_INVALID_VALUE);     // past the memory
  EXPECT_EQ(cuMulticastBindMem_v2(mc, 0, gran / 2, mem, 0, gran, 0), CUDA_ERROR_INVALID_VALUE);  // unaligned

  CUdeviceptr p = alloc(gran);
  EXPECT_EQ(cuMulticastBindAddr_v2(mc, 0, gran, p, gran, 0), CUDA_SUCCESS);
  EXPECT_NE(cuMulticastBindAddr_v2(mc, static_cast<CUdevice>(gran), p, gran, 0, 0), CUDA_SUCCESS);  // shifted
  EXPECT_EQ(cuMulticastUnbind(mc, 0, gran, gran), CUDA_SUCCESS);

  // The 12.1 forms bind for every device of the team.
  EXPECT_EQ(cuMulticastBindMem(mc, 0, mem, 0, gran, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindAddr(mc, 3 * gran, p, gran, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastUnbind(mc, 0, 0, gran), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastUnbind(mc, 0, 3 * gran, gran), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(mem), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(mc), CUDA_ERROR_INVALID_VALUE);
}
#endif

}  // namespace
}  // namespace sim_test
