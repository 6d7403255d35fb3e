// Unit test of the simulated CUDA driver: streams, workers, events, stream memory operations (sim_streams.cc).
// Part of sim_test; the shared helpers are in sim_test_support.h.

#include "sim_test_support.h"

namespace sim_test {
namespace {

// ======================================================================
// In-process tests (nothing here faults)
// ======================================================================

TEST_F(SimTest, StreamIds) {
  using GetId = CUresult (*)(CUstream, unsigned long long*);
  auto get_id_ptsz = reinterpret_cast<GetId>(sym("cuStreamGetId_ptsz"));
  ASSERT_NE(get_id_ptsz, nullptr);

  EXPECT_EQ(id_of(cuStreamGetId, nullptr), 1u);
  EXPECT_EQ(id_of(cuStreamGetId, CU_STREAM_LEGACY), 1u);
  EXPECT_EQ(id_of(get_id_ptsz, CU_STREAM_LEGACY), 1u);

  CUstream a, b;
  ASSERT_EQ(cuStreamCreate(&a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  unsigned long long ia = 0, ib = 0;
  ASSERT_EQ(cuStreamGetId(a, &ia), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetId(b, &ib), CUDA_SUCCESS);
  EXPECT_GE(ia, 1000u);
  EXPECT_GT(ib, ia);
  ASSERT_EQ(cuStreamDestroy(a), CUDA_SUCCESS);
  unsigned long long id = 0;
  EXPECT_EQ(cuStreamGetId(a, &id), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(a), CUDA_ERROR_INVALID_HANDLE);
  CUstream c = stream();
  unsigned long long ic = 0;
  ASSERT_EQ(cuStreamGetId(c, &ic), CUDA_SUCCESS);
  EXPECT_GT(ic, ib);  // never reused

  unsigned long long pt1 = 0, pt2 = 0, pt_null = 0, other = 0, other2 = 0;
  ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &pt1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &pt2), CUDA_SUCCESS);
  ASSERT_EQ(get_id_ptsz(nullptr, &pt_null), CUDA_SUCCESS);
  EXPECT_EQ(pt1, pt2);
  EXPECT_EQ(pt1, pt_null);
  EXPECT_NE(pt1, 1u);
  EXPECT_GE(pt1, 1000u);
  std::thread([&] {
    // The per-thread stream is the current context's: none current, none to name (cuda.h's cuStreamGetCtx rule).
    EXPECT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &other), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(set_primary_current(), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamGetId(CU_STREAM_PER_THREAD, &other), CUDA_SUCCESS);
    EXPECT_EQ(get_id_ptsz(nullptr, &other2), CUDA_SUCCESS);
  }).join();
  EXPECT_EQ(other, other2);
  std::set<unsigned long long> ids{1, ib, ic, pt1, other};
  EXPECT_EQ(ids.size(), 5u);

  EXPECT_EQ(cuStreamDestroy(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(b), CUDA_SUCCESS);
}

TEST_F(SimTest, StreamRunsInOrderAsynchronously) {
  CUstream s = stream();
  alignas(64) static uint32_t flags[64];
  memset(flags, 0, sizeof flags);
  ASSERT_EQ(cuMemHostRegister(flags, sizeof flags, 0), CUDA_SUCCESS);
  CUdeviceptr dflags = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer(&dflags, flags, 0), CUDA_SUCCESS);
  EXPECT_EQ(dflags, reinterpret_cast<CUdeviceptr>(flags));
  CUdeviceptr buf = alloc(16 * sizeof(float));
  float* fb = reinterpret_cast<float*>(buf);

  auto t0 = Clock::now();
  ASSERT_EQ(k_sleep(k, s, 100000), CUDA_SUCCESS);
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(k_fill(k, s, fb, 16, static_cast<float>(i)), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamWriteValue32(s, dflags + 4 * i, i + 1, 0), CUDA_SUCCESS);
  }
  // The launch calls returned at once; nothing has run yet.
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(90));
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(load(&flags[0]), 0u);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(100));
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(load(&flags[i]), static_cast<uint32_t>(i + 1));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(fb[i], 63.0f);  // last fill wins: in order

  ASSERT_EQ(cuMemHostUnregister(flags), CUDA_SUCCESS);
}

TEST_F(SimTest, StreamsAreIndependent) {
  CUstream s1, s2;
  ASSERT_EQ(cuStreamCreate(&s1, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
  CUdeviceptr flag = alloc(8);
  ASSERT_EQ(k_sleep(k, s1, 300000), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue64(s2, flag, 42, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);  // does not wait for s1
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 42u);
  EXPECT_EQ(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamDestroy(s1), CUDA_SUCCESS);  // waits for the sleep, joins
  EXPECT_EQ(cuStreamDestroy(s2), CUDA_SUCCESS);
}

TEST_F(SimTest, CrossStreamEvents) {
  CUstream s1 = stream(), s2 = stream();
  CUevent ev, never;
  ASSERT_EQ(cuEventCreate(&ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&never, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(never), CUDA_SUCCESS);
  EXPECT_EQ(cuEventSynchronize(never), CUDA_SUCCESS);

  CUdeviceptr buf = alloc(4 * sizeof(float)), flag = alloc(4);
  ASSERT_EQ(k_sleep(k, s1, 60000), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, s1, reinterpret_cast<float*>(buf), 4, 5.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(ev, s1), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s2, ev, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(s2, never, 0), CUDA_SUCCESS);  // no-op
  ASSERT_EQ(cuStreamWriteValue32(s2, flag, 7, 0), CUDA_SUCCESS);

  EXPECT_EQ(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(load(reinterpret_cast<uint32_t*>(flag)), 0u);  // s2 still waits for s1

  ASSERT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);
  EXPECT_EQ(load(reinterpret_cast<uint32_t*>(flag)), 7u);
  EXPECT_EQ(cuEventQuery(ev), CUDA_SUCCESS);  // s1 reached the event first
  float host[4] = {};
  ASSERT_EQ(cuMemcpyDtoH(host, buf, sizeof host), CUDA_SUCCESS);
  for (float f : host) EXPECT_EQ(f, 5.0f);

  // Re-recording moves the marker.
  ASSERT_EQ(k_sleep(k, s1, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(ev, s1), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(ev), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuEventSynchronize(ev), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(ev), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s1), CUDA_SUCCESS);

  EXPECT_EQ(cuEventDestroy(ev), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy(never), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(SimTest, MemopsAndHostRegistration) {
  alignas(64) static uint64_t host[8];
  memset(host, 0, sizeof host);
  CUdeviceptr d = 0;
  EXPECT_EQ(cuMemHostGetDevicePointer(&d, host, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue32(nullptr, reinterpret_cast<CUdeviceptr>(host), 1, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemHostRegister(host, sizeof host, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(&host[4], 8, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_EQ(cuMemHostGetDevicePointer(&d, &host[2], 0), CUDA_SUCCESS);
  EXPECT_EQ(d, reinterpret_cast<CUdeviceptr>(&host[2]));
  ASSERT_EQ(cuMemHostGetDevicePointer(&d, host, 0), CUDA_SUCCESS);

  CUstream s = stream();
  ASSERT_EQ(k_sleep(k, s, 30000), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue64(s, d, 0x1122334455667788ull, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32(s, d + 8, 0xabcdu, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue64(s, d + 56, 9, 0), CUDA_SUCCESS);  // last word
  EXPECT_EQ(load(&host[0]), 0u);                                   // not yet: behind the sleep
  // The memop lands without any API call from this thread.
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (load(&host[7]) != 9u && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(load(&host[7]), 9u);
  EXPECT_EQ(load(&host[0]), 0x1122334455667788ull);
  EXPECT_EQ(load(reinterpret_cast<uint32_t*>(&host[1])), 0xabcdu);

  EXPECT_EQ(cuStreamWriteValue64(s, d + 60, 1, 0), CUDA_ERROR_INVALID_VALUE);  // crosses the end / misaligned
  EXPECT_EQ(cuStreamWriteValue64(s, d + 64, 1, 0), CUDA_ERROR_INVALID_VALUE);  // past the end
  EXPECT_EQ(cuStreamWriteValue32(s, d + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);   // misaligned
  EXPECT_EQ(cuStreamWriteValue32(s, d, 1, 0x80), CUDA_ERROR_INVALID_VALUE);    // bad flags

  // cuMemAlloc memory is a valid target too; _v2 names are the same functions.
  CUdeviceptr a = 0;
  ASSERT_EQ(cuMemAlloc(&a, 16), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32_v2(s, a + 12, 5, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(load(reinterpret_cast<uint32_t*>(a + 12)), 5u);
  EXPECT_EQ(cuMemFree(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);

  ASSERT_EQ(cuMemHostUnregister(host), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostUnregister(host), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(cuStreamWriteValue32(s, d, 1, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimTest, PerThreadDefaultStreams) {
  using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
  auto launch_ptsz = reinterpret_cast<Launch>(sym("cuLaunchKernel_ptsz"));
  ASSERT_NE(launch_ptsz, nullptr);
  int64_t us = 60000;
  void* args[] = {&us};
  // NULL to a _ptsz entry point is the per-thread stream, not the legacy one.
  ASSERT_EQ(launch_ptsz(k.sleep, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
  // Another thread's per-thread stream is a different stream.
  CUdeviceptr p = 0;
  std::thread([&] {
    EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_CONTEXT);  // no current context: no stream
    EXPECT_EQ(set_primary_current(), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAlloc(&p, 16), CUDA_SUCCESS);
    EXPECT_EQ(k_fill(k, CU_STREAM_PER_THREAD, reinterpret_cast<float*>(p), 4, 6.0f), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    EXPECT_EQ(reinterpret_cast<float*>(p)[3], 6.0f);
  }).join();
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree(p), CUDA_SUCCESS);  // (waits for every stream)
}

TEST_F(SimTest, ManyThreadsManyStreams) {
  constexpr int kThreads = 4, kIters = 40;
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  CUdeviceptr counters = alloc(kThreads * kIters * 4);
  CUstream shared = stream();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto check = [&](CUresult r) {
        if (r != CUDA_SUCCESS) failures.fetch_add(1);
      };
      check(cuCtxSetCurrent(ctx));
      CUstream s;
      check(cuStreamCreate(&s, 0));
      CUevent ev;
      check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
      CUdeviceptr buf = 0;
      check(cuMemAlloc(&buf, 64 * sizeof(float)));
      for (int i = 0; i < kIters; ++i) {
        check(k_fill(k, s, reinterpret_cast<float*>(buf), 64, static_cast<float>(i)));
        check(cuStreamWriteValue32(s, counters + 4 * (t * kIters + i), i + 1, 0));
        check(cuEventRecord(ev, s));
        check(cuStreamWaitEvent(shared, ev, 0));
        check(cuStreamWriteValue32(shared, counters + 4 * (t * kIters + i), i + 1, 0));
        if (i % 8 == 0) check(cuStreamQuery(s) == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : cuStreamQuery(s));
        if (i % 10 == 0) check(cuEventSynchronize(ev));
      }
      check(cuStreamSynchronize(s));
      float host[64];
      check(cuMemcpyDtoH(host, buf, sizeof host));
      for (float f : host)
        if (f != static_cast<float>(kIters - 1)) failures.fetch_add(1);
      check(cuMemFree(buf));
      check(cuEventDestroy(ev));
      check(cuStreamDestroy(s));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  auto* c = reinterpret_cast<uint32_t*>(counters);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kIters; ++i) EXPECT_EQ(load(&c[t * kIters + i]), static_cast<uint32_t>(i + 1));
}

TEST_F(SimTest, SixtyFourBitMemopsByDefault) {
  int a = -1;
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 1);  // as on an H200
}

// ======================================================================
// Child-process tests
// ======================================================================

// SIM_CUDA_NO_64BIT_MEMOPS=1: attribute 122 is 0 and 64-bit writes fail; 32-bit ones work.
SIM_CHILD_TEST(No64BitMemops) {
  setenv("SIM_CUDA_NO_64BIT_MEMOPS", "1", 1);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  int a = -1;
  CHILD_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0), CUDA_SUCCESS);
  CHILD_EQ(a, 0);
  CHILD_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0), CUDA_SUCCESS);
  CUdeviceptr flag = child_alloc(8);
  CHILD_EQ(cuStreamWriteValue64(nullptr, flag, 5, 0), CUDA_ERROR_NOT_SUPPORTED);
  using Write64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned);
  CHILD_EQ(reinterpret_cast<Write64>(sym("cuStreamWriteValue64_v2_ptsz"))(nullptr, flag, 5, 0),
           CUDA_ERROR_NOT_SUPPORTED);
  CHILD_EQ(cuStreamWriteValue32(nullptr, flag, 5, 0), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  CHILD_EQ(load(reinterpret_cast<uint32_t*>(flag)), 5u);
  child_exit_ok();
}

}  // namespace
}  // namespace sim_test
