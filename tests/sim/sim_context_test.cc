// Unit test of the simulated CUDA driver: device, attributes and contexts (sim_context.cc).
// Part of sim_test; the shared helpers are in sim_test_support.h.

#include "sim_test_support.h"

namespace sim_test {
namespace {

TEST_F(SimTest, DeviceContextAndVersion) {
  int v = 0;
  ASSERT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, CUDA_VERSION);  // SIM_CUDA_DRIVER_VERSION unset: the headers' version
  int n = 0;
  ASSERT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  EXPECT_EQ(n, 1);
  CUdevice dev = -1;
  ASSERT_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  char name[64];
  ASSERT_EQ(cuDeviceGetName(name, sizeof name, 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "cdsa simulated GPU");
  char bus[13];  // cuda.h: "at least 13 characters"
  ASSERT_EQ(cuDeviceGetPCIBusId(bus, sizeof bus, 0), CUDA_SUCCESS);
  EXPECT_STREQ(bus, "0000:3B:00.0");
  EXPECT_EQ(cuDeviceGetPCIBusId(bus, sizeof bus, 1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetPCIBusId(nullptr, 13, 0), CUDA_ERROR_INVALID_VALUE);
  int a = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 9);
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 0);
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 132);
  ASSERT_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_SUCCESS);
  EXPECT_EQ(a, 32);
  EXPECT_EQ(cuDeviceGetAttribute(&a, static_cast<CUdevice_attribute>(100000), 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&a, static_cast<CUdevice_attribute>(0), 0), CUDA_ERROR_INVALID_VALUE);

  CUcontext ctx = nullptr, cur = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  EXPECT_EQ(cur, ctx);
  EXPECT_EQ(id_of(cuCtxGetId, ctx), 1u);
  EXPECT_EQ(id_of(cuCtxGetId, nullptr), 1u);  // the current context
  EXPECT_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);

  // A thread without a current context.
  std::thread([&] {
    CUcontext c = ctx;
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, nullptr);
    unsigned long long id = 0;
    EXPECT_EQ(cuCtxGetId(nullptr, &id), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(k_fill(k, nullptr, nullptr, 0, 1.0f), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(k_fill(k, nullptr, nullptr, 0, 1.0f), CUDA_SUCCESS);
  }).join();
}

// CUDA 13's context-taking forms (cudaDeviceSynchronize = cuCtxSynchronize_v2).
TEST_F(SimTest, ContextV2EntryPoints) {
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  CUstream s = stream();
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_SUCCESS);  // null: the current context; waits for every stream
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  ASSERT_EQ(k_sleep(k, s, 20000), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  CUdevice dev = -1;
  ASSERT_EQ(cuCtxGetDevice_v2(&dev, ctx), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  dev = -1;
  ASSERT_EQ(cuCtxGetDevice_v2(&dev, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cuCtxGetDevice_v2(nullptr, ctx), CUDA_ERROR_INVALID_VALUE);
  CUctx_st* bogus = reinterpret_cast<CUctx_st*>(&dev);
  EXPECT_EQ(cuCtxSynchronize_v2(bogus), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxGetDevice_v2(&dev, bogus), CUDA_ERROR_INVALID_CONTEXT);
  std::thread([&] {  // no current context: null names none
    EXPECT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxGetDevice_v2(&dev, nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSynchronize_v2(ctx), CUDA_SUCCESS);
  })
      .join();
}

// ======================================================================
// Child-process tests: several devices and contexts (SIM_CUDA_DEVICES), per-context sticky errors
// ======================================================================

// A retained primary context of `dev`, made current.
CUcontext child_primary(int dev) {
  CUcontext c = nullptr;
  CHILD_EQ(cuDevicePrimaryCtxRetain(&c, dev), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSetCurrent(c), CUDA_SUCCESS);
  return c;
}

unsigned long long stream_id(CUstream s) { return id_of(cuStreamGetId, s); }

SIM_CHILD_TEST(TwoDevicesEachWithItsPrimaryContext) {
  setenv("SIM_CUDA_DEVICES", "2", 1);
  CHILD_EQ(cuInit(0), CUDA_SUCCESS);
  int n = 0;
  CHILD_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  CHILD_EQ(n, 2);
  CUdevice d = -1;
  CHILD_EQ(cuDeviceGet(&d, 1), CUDA_SUCCESS);
  CHILD_EQ(d, 1);
  CHILD_EQ(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
  char name0[64], name1[64], bus0[13], bus1[13];
  CHILD_EQ(cuDeviceGetName(name0, sizeof name0, 0), CUDA_SUCCESS);
  CHILD_EQ(cuDeviceGetName(name1, sizeof name1, 1), CUDA_SUCCESS);
  CHILD_CHECK(strcmp(name0, "cdsa simulated GPU") == 0);
  CHILD_CHECK(strcmp(name1, name0) != 0);
  CHILD_EQ(cuDeviceGetPCIBusId(bus0, sizeof bus0, 0), CUDA_SUCCESS);
  CHILD_EQ(cuDeviceGetPCIBusId(bus1, sizeof bus1, 1), CUDA_SUCCESS);
  CHILD_CHECK(strcmp(bus0, "0000:3B:00.0") == 0);
  CHILD_CHECK(strcmp(bus1, bus0) != 0 && strlen(bus1) == 12);
  CHILD_EQ(cuDeviceGetPCIBusId(bus1, sizeof bus1, 2), CUDA_ERROR_INVALID_DEVICE);
  int a = 0;
  CHILD_EQ(cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1), CUDA_SUCCESS);
  CHILD_EQ(a, 132);

  // Each device its own primary context, inactive until retained.
  unsigned flags = 7;
  int active = 1;
  CHILD_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  CHILD_EQ(active, 0);
  CHILD_EQ(flags, 0u);
  CHILD_EQ(cuDevicePrimaryCtxSetFlags(1, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  CHILD_EQ(cuDevicePrimaryCtxSetFlags(1, 0x10000), CUDA_ERROR_INVALID_VALUE);
  CUcontext p1 = child_primary(1);
  CHILD_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  CHILD_EQ(active, 1);
  CHILD_EQ(flags, static_cast<unsigned>(CU_CTX_SCHED_BLOCKING_SYNC));
  CHILD_EQ(cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS);
  CHILD_EQ(active, 0);
  CHILD_EQ(flags, 0u);
  CUcontext p0 = child_primary(0);
  CHILD_CHECK(p0 != p1);
  CUcontext again = nullptr;
  CHILD_EQ(cuDevicePrimaryCtxRetain(&again, 1), CUDA_SUCCESS);  // one per device
  CHILD_CHECK(again == p1);
  CHILD_EQ(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  CUdevice dev = -1;
  CHILD_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);  // p0 current
  CHILD_EQ(dev, 0);
  CHILD_EQ(cuCtxGetDevice_v2(&dev, p1), CUDA_SUCCESS);
  CHILD_EQ(dev, 1);
  CHILD_EQ(cuCtxSetCurrent(p1), CUDA_SUCCESS);
  CHILD_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  CHILD_EQ(dev, 1);
  // Ids: one counter over every context of every device.
  CUcontext c1 = nullptr;
  CHILD_EQ(cuCtxCreate(&c1, nullptr, 0, 1), CUDA_SUCCESS);
  CHILD_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  CHILD_EQ(dev, 1);
  CHILD_EQ(cuCtxCreate(&c1, nullptr, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  std::set<unsigned long long> ids{id_of(cuCtxGetId, p0), id_of(cuCtxGetId, p1), id_of(cuCtxGetId, c1)};
  CHILD_EQ(ids.size(), 3u);
  CHILD_CHECK(ids.count(0) == 0);
  // The last release resets the context: inactive, 709 where it is current.
  CHILD_EQ(cuCtxSetCurrent(p1), CUDA_SUCCESS);
  CHILD_EQ(cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  CHILD_EQ(cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
  CHILD_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  CHILD_EQ(active, 0);
  CHILD_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  unsigned long long id = 0;
  CHILD_EQ(cuCtxGetId(p1, &id), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  child_exit_ok();
}

SIM_CHILD_TEST(ABadDeviceCountIsSaidAndOneDeviceUsed) {
  Fd2Capture cap;
  setenv("SIM_CUDA_DEVICES", "9", 1);
  CHILD_EQ(cuInit(0), CUDA_SUCCESS);
  int n = 0;
  CHILD_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  CHILD_EQ(n, 1);
  CHILD_STDERR(cap, "simulated CUDA driver: SIM_CUDA_DEVICES=9 is not a number from 1 to 8; using the default\n");
  child_exit_ok();
}

// A created stream belongs to the context current at its creation (cuStreamGetCtx[_v2], cuStreamGetDevice); the
// NULL, legacy and per-thread handles are the current context's own streams.
SIM_CHILD_TEST(StreamsBelongToTheirContext) {
  setenv("SIM_CUDA_DEVICES", "2", 1);
  CHILD_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext a = child_primary(0);
  Kernels ka;
  CHILD_EQ(load_kernels(ka), CUDA_SUCCESS);
  CUstream sa = child_stream();
  CUevent ea;
  CHILD_EQ(cuEventCreate(&ea, 0), CUDA_SUCCESS);
  const unsigned long long legacy_a = stream_id(CU_STREAM_LEGACY), per_thread_a = stream_id(CU_STREAM_PER_THREAD);
  CUcontext b = child_primary(1);
  Kernels kb;
  CHILD_EQ(load_kernels(kb), CUDA_SUCCESS);
  CUstream sb = child_stream();
  CUcontext got = nullptr;
  CHILD_EQ(cuStreamGetCtx(sa, &got), CUDA_SUCCESS);  // b is current
  CHILD_CHECK(got == a);
  CHILD_EQ(cuStreamGetCtx(sb, &got), CUDA_SUCCESS);
  CHILD_CHECK(got == b);
  CUgreenCtx green = reinterpret_cast<CUgreenCtx>(&got);
  CHILD_EQ(cuStreamGetCtx_v2(sa, &got, &green), CUDA_SUCCESS);
  CHILD_CHECK(got == a && green == nullptr);
  CHILD_EQ(cuStreamGetCtx(nullptr, &got), CUDA_SUCCESS);  // the special handles: the current context
  CHILD_CHECK(got == b);
  CHILD_EQ(cuStreamGetCtx(CU_STREAM_PER_THREAD, &got), CUDA_SUCCESS);
  CHILD_CHECK(got == b);
  CUdevice dev = -1;
  CHILD_EQ(cuStreamGetDevice(sa, &dev), CUDA_SUCCESS);
  CHILD_EQ(dev, 0);
  CHILD_EQ(cuStreamGetDevice(nullptr, &dev), CUDA_SUCCESS);
  CHILD_EQ(dev, 1);
  // Each context its own legacy and per-thread streams; stream ids unique process-wide.
  std::set<unsigned long long> ids{
      legacy_a,      per_thread_a, stream_id(CU_STREAM_LEGACY), stream_id(CU_STREAM_PER_THREAD),
      stream_id(sa), stream_id(sb)};
  CHILD_EQ(ids.size(), 6u);
  CHILD_EQ(legacy_a, 1u);
  std::thread([&] {  // no current context: the special handles name no stream
    CUcontext c = nullptr;
    CHILD_EQ(cuStreamGetCtx(nullptr, &c), CUDA_ERROR_INVALID_CONTEXT);
    CHILD_EQ(cuStreamGetCtx(sa, &c), CUDA_SUCCESS);
    CHILD_CHECK(c == a);
  })
      .join();
  // Work on a stream of another context than the current one runs there; a context's function only on its streams.
  CUdeviceptr buf = child_alloc(16);
  auto* f = reinterpret_cast<float*>(buf);
  CHILD_EQ(k_fill(ka, sa, f, 1, 4.0f), CUDA_SUCCESS);
  CHILD_EQ(k_fill(ka, sb, f, 1, 5.0f), CUDA_ERROR_INVALID_HANDLE);
  CHILD_EQ(k_fill(kb, sa, f, 1, 5.0f), CUDA_ERROR_INVALID_HANDLE);
  CHILD_EQ(k_fill(ka, nullptr, f, 1, 5.0f), CUDA_ERROR_INVALID_HANDLE);  // b's legacy stream
  CHILD_EQ(cuStreamSynchronize(sa), CUDA_SUCCESS);
  CHILD_CHECK(f[0] == 4.0f);
  // A CUkernel has no context: it runs on either.
  CUlibrary lib;
  CUkernel fill;
  CHILD_EQ(cuLibraryLoadData(&lib, "image", nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CHILD_EQ(cuLibraryGetKernel(&fill, lib, "fill_f32"), CUDA_SUCCESS);
  int32_t one = 1;
  float v = 6;
  // Each launch its own element: the two streams' workers run at once (the same float written by both is a data
  // race in the sim's host threads, which TSan reports when their kernels overlap).
  CUdeviceptr second = buf + sizeof(float);
  void* args[] = {&buf, &one, &v};
  void* args_b[] = {&second, &one, &v};
  CHILD_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(fill), 1, 1, 1, 1, 1, 1, 0, sa, args, nullptr), CUDA_SUCCESS);
  CHILD_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(fill), 1, 1, 1, 1, 1, 1, 0, sb, args_b, nullptr), CUDA_SUCCESS);
  // cuda.h: an event and a stream of different contexts: cuEventRecord answers CUDA_ERROR_INVALID_HANDLE; a wait on
  // another context's event is allowed.
  CHILD_EQ(cuEventRecord(ea, sb), CUDA_ERROR_INVALID_HANDLE);
  CHILD_EQ(cuEventRecord(ea, sa), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWaitEvent(sb, ea, 0), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(sb), CUDA_SUCCESS);
  // cuCtxSynchronize waits for the current context's streams only.
  CHILD_EQ(k_sleep(ka, sa, 300000), CUDA_SUCCESS);
  auto t0 = Clock::now();
  CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);  // b's
  CHILD_CHECK(Clock::now() - t0 < std::chrono::milliseconds(200));
  CHILD_EQ(cuStreamQuery(sa), CUDA_ERROR_NOT_READY);
  CHILD_EQ(cuCtxSynchronize_v2(a), CUDA_SUCCESS);
  CHILD_EQ(cuStreamQuery(sa), CUDA_SUCCESS);
  child_exit_ok();
}

// A fault in context A (device 0) makes A dead; B (device 1) and C (another context on device 0) keep working. A
// call naming A's stream, event or A itself answers A's error, from any thread and whatever is current; the text is
// printed once, by the first of them.
SIM_CHILD_TEST(AFaultInOneContextLeavesTheOthersWorking) {
  Fd2Capture cap;
  setenv("SIM_CUDA_DEVICES", "2", 1);
  CHILD_EQ(cuInit(0), CUDA_SUCCESS);
  alignas(64) static uint32_t marks[4];
  CHILD_EQ(cuMemHostRegister(marks, sizeof marks, 0), CUDA_SUCCESS);
  CUdeviceptr dm = reinterpret_cast<CUdeviceptr>(marks);
  const int64_t bad[5] = {0, 1, -100, 7, 9};  // first offender: i = 3

  CUcontext b = child_primary(1);
  Kernels kb;
  CHILD_EQ(load_kernels(kb), CUDA_SUCCESS);
  CUstream sb = child_stream();
  CUevent eb;
  CHILD_EQ(cuEventCreate(&eb, 0), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(kb, sb, 150000), CUDA_SUCCESS);  // running when A faults
  CHILD_EQ(cuEventRecord(eb, sb), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(sb, dm + 4, 2, 0), CUDA_SUCCESS);

  CUcontext a = child_primary(0);
  Kernels ka;
  CHILD_EQ(load_kernels(ka), CUDA_SUCCESS);
  std::atomic<bool> a_thread_go{false};
  std::thread a_thread([&] {
    CHILD_EQ(cuCtxSetCurrent(a), CUDA_SUCCESS);
    while (!a_thread_go.load()) std::this_thread::yield();
    int n = 0;
    CHILD_EQ(cuDeviceGetCount(&n), CUDA_ERROR_ASSERT);
    CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_ASSERT);
    CUdeviceptr q = 0;
    CHILD_EQ(cuMemAlloc(&q, 4), CUDA_ERROR_ASSERT);
    CHILD_EQ(cuCtxPopCurrent(nullptr), CUDA_ERROR_ASSERT);
    CHILD_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);          // names no context
    CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);  // none current: no fault to answer
    CHILD_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
  });
  CUdeviceptr out = child_alloc(4), tgt = child_copy_to_device(bad);
  CUstream sa = child_stream();
  CUevent ea;
  CHILD_EQ(cuEventCreate(&ea, 0), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(ka, sa, 50000), CUDA_SUCCESS);  // the fault comes after the calls below
  CHILD_EQ(k_nll(ka, sa, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(tgt), 5, 5, -100), CUDA_SUCCESS);
  CHILD_EQ(cuEventRecord(ea, sa), CUDA_SUCCESS);
  CHILD_EQ(k_sleep(ka, sa, 1000), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(sa, dm, 1, 0), CUDA_SUCCESS);  // queued behind the fault: never lands

  CUcontext c = nullptr;
  CHILD_EQ(cuCtxCreate(&c, nullptr, 0, 0), CUDA_SUCCESS);  // device 0 too, current now
  Kernels kc;
  CHILD_EQ(load_kernels(kc), CUDA_SUCCESS);
  CUresult seen = CUDA_ERROR_NOT_READY;  // c is current: the query names sa, and prints A's text
  CHILD_CHECK(wait_until([&] { return (seen = cuStreamQuery(sa)) != CUDA_ERROR_NOT_READY; }, std::chrono::seconds(5)));
  CHILD_EQ(seen, CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, kNllLine);

  // B and C keep working.
  CHILD_EQ(cuCtxSetCurrent(b), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  CHILD_EQ(load(&marks[1]), 2u);
  CHILD_EQ(cuEventQuery(eb), CUDA_SUCCESS);
  CUdeviceptr p = child_alloc(16);
  CHILD_EQ(k_fill(kb, sb, reinterpret_cast<float*>(p), 4, 8.0f), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(sb), CUDA_SUCCESS);
  CHILD_CHECK(reinterpret_cast<float*>(p)[3] == 8.0f);
  CHILD_EQ(cuCtxSynchronize_v2(b), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSynchronize_v2(c), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSetCurrent(c), CUDA_SUCCESS);
  CHILD_EQ(k_fill(kc, nullptr, reinterpret_cast<float*>(p), 4, 9.0f), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  CHILD_CHECK(reinterpret_cast<float*>(p)[0] == 9.0f);

  // Whatever is current (here B), what names A answers A's error.
  CHILD_EQ(cuCtxSetCurrent(b), CUDA_SUCCESS);
  CHILD_EQ(cuEventQuery(ea), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuEventSynchronize(ea), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuStreamQuery(sa), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuStreamSynchronize(sa), CUDA_ERROR_ASSERT);
  CHILD_EQ(k_fill(ka, sa, reinterpret_cast<float*>(p), 4, 1.0f), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuCtxSynchronize_v2(a), CUDA_ERROR_ASSERT);
  unsigned long long id = 0;
  CHILD_EQ(cuCtxGetId(a, &id), CUDA_ERROR_ASSERT);
  const char* name = nullptr;
  CHILD_EQ(cuFuncGetName(&name, ka.nll), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuFuncGetName(&name, kb.nll), CUDA_SUCCESS);
  // A thread whose current context is A: every call naming nothing answers A's error.
  a_thread_go = true;
  a_thread.join();
  CHILD_EQ(cuCtxSetCurrent(a), CUDA_ERROR_ASSERT);  // names A
  CHILD_EQ(load(&marks[0]), 0u);                    // A's queued work was discarded
  CHILD_STDERR(cap, kNllLine);                      // once
  child_exit_ok();
}

// Two contexts fault: each text is printed once, by the first call that observes that context's fault.
SIM_CHILD_TEST(EachFaultingContextPrintsItsTextOnce) {
  Fd2Capture cap;
  setenv("SIM_CUDA_DEVICES", "2", 1);
  CHILD_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext b = child_primary(1);
  Kernels kb;
  CHILD_EQ(load_kernels(kb), CUDA_SUCCESS);
  CUcontext a = child_primary(0);
  Kernels ka;
  CHILD_EQ(load_kernels(ka), CUDA_SUCCESS);
  const int64_t bad_targets[5] = {0, 1, -100, 7, 9};
  const int64_t bad_index[3] = {0, 9, 1};
  CUdeviceptr out = child_alloc(64), tgt = child_copy_to_device(bad_targets), idx = child_copy_to_device(bad_index);
  CHILD_EQ(k_nll(ka, nullptr, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(tgt), 5, 5, -100),
           CUDA_SUCCESS);
  CHILD_EQ(cuCtxSetCurrent(b), CUDA_SUCCESS);  // names b: a's fault is not its answer
  CHILD_EQ(k_index(kb, nullptr, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(idx), 3, 4), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_ASSERT);  // b's
  CHILD_STDERR(cap, index_line(1));
  CHILD_EQ(cuCtxSynchronize_v2(b), CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, index_line(1));
  CHILD_EQ(cuCtxSynchronize_v2(a), CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, index_line(1) + kNllLine);
  CHILD_EQ(cuCtxSetCurrent(a), CUDA_ERROR_ASSERT);  // b current and dead: the context calls refuse (default mode)
  child_exit_ok();
}

// The context-stack calls after a fault in the current context: SIM_CUDA_CTX_CURRENT_AFTER_FAULT=fail (the default)
// answers the sticky error, =ok works on. cuCtxGetDevice answers the error in both.
void ctx_calls_after_fault(const char* mode, bool ok) {
  if (mode != nullptr) setenv("SIM_CUDA_CTX_CURRENT_AFTER_FAULT", mode, 1);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUcontext primary = nullptr;
  CHILD_EQ(cuCtxGetCurrent(&primary), CUDA_SUCCESS);
  CHILD_EQ(k_illegal(k, nullptr), CUDA_SUCCESS);
  CHILD_CHECK(wait_until([] { return cuStreamQuery(nullptr) == CUDA_ERROR_ILLEGAL_ADDRESS; }, std::chrono::seconds(5)));
  CUcontext got = nullptr;
  CHILD_EQ(cuCtxGetCurrent(&got), ok ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_CHECK(got == (ok ? primary : nullptr));
  // Not governed by the switch: cuCtxGetDevice[_v2] answer the error, as do the calls naming the dead context.
  CUdevice dev = -1;
  CHILD_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_EQ(cuCtxGetDevice_v2(&dev, nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_EQ(cuCtxPushCurrent(primary), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_EQ(cuCtxPopCurrent(&got), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);  // names none
  got = primary;
  CHILD_EQ(cuCtxGetCurrent(&got), CUDA_SUCCESS);
  CHILD_CHECK(got == nullptr);
  CHILD_EQ(cuCtxSetCurrent(primary), CUDA_ERROR_ILLEGAL_ADDRESS);
  child_exit_ok();
}

SIM_CHILD_TEST(CtxCurrentAfterFaultFailsByDefault) { ctx_calls_after_fault(nullptr, false); }
SIM_CHILD_TEST(CtxCurrentAfterFaultFailsWhenAskedTo) { ctx_calls_after_fault("fail", false); }
SIM_CHILD_TEST(CtxCurrentAfterFaultWorksWhenAskedTo) { ctx_calls_after_fault("ok", true); }

// A context destroyed while another thread has it current: that thread's calls answer 709 (cuda.h).
SIM_CHILD_TEST(ADestroyedContextStillCurrentElsewhereAnswers709) {
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  CUcontext c = nullptr;
  CHILD_EQ(cuCtxCreate(&c, nullptr, 0, 0), CUDA_SUCCESS);
  CUstream s = child_stream();
  std::atomic<int> step{0};
  std::thread other([&] {
    CHILD_EQ(cuCtxSetCurrent(c), CUDA_SUCCESS);
    step = 1;
    while (step.load() != 2) std::this_thread::yield();
    CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CUstream t;
    CHILD_EQ(cuStreamCreate(&t, 0), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CHILD_EQ(cuStreamQuery(nullptr), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  });
  while (step.load() != 1) std::this_thread::yield();
  CHILD_EQ(cuCtxDestroy(c), CUDA_SUCCESS);  // popped here: the primary context is current again
  CUcontext cur = nullptr;
  CHILD_EQ(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
  CHILD_CHECK(cur != c && cur != nullptr);
  CHILD_EQ(cuStreamQuery(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);  // its stream went with it
  CHILD_EQ(cuCtxSetCurrent(c), CUDA_ERROR_INVALID_CONTEXT);
  CHILD_EQ(cuCtxDestroy(c), CUDA_ERROR_INVALID_CONTEXT);
  unsigned long long id = 0;
  CHILD_EQ(cuCtxGetId(c, &id), CUDA_ERROR_INVALID_CONTEXT);
  step = 2;
  other.join();
  CHILD_EQ(cuStreamDestroy(s), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  child_exit_ok();
}

// Every call that frees a context's modules (cuCtxDestroy, the last primary release, a primary reset) and
// cuModuleUnload frees their functions; the next function made gets a freed one's address (a pool, last freed
// first), under another name: a tool keeping names by handle would name the old kernel.
SIM_CHILD_TEST(FunctionHandlesAreFreedWithTheirContextAndReused) {
  CHILD_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext primary = child_primary(0);
  CUlibrary lib;
  CUkernel knll, kfill;
  CHILD_EQ(cuLibraryLoadData(&lib, "image", nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CHILD_EQ(cuLibraryGetKernel(&knll, lib, "nll_loss_forward_reduce_cuda_kernel_2d"), CUDA_SUCCESS);
  CHILD_EQ(cuLibraryGetKernel(&kfill, lib, "fill_f32"), CUDA_SUCCESS);
  const char* name = nullptr;
  auto name_of = [&](CUfunction f) {
    name = nullptr;
    return cuFuncGetName(&name, f) == CUDA_SUCCESS ? std::string(name) : std::string("(refused)");
  };
  // 1. cuCtxDestroy: a module's function and a CUkernel's function in that context.
  CUcontext c = nullptr;
  CHILD_EQ(cuCtxCreate(&c, nullptr, 0, 0), CUDA_SUCCESS);
  CUmodule m;
  CUfunction fill = nullptr, kf = nullptr;
  CHILD_EQ(cuModuleLoadData(&m, "image"), CUDA_SUCCESS);
  CHILD_EQ(cuModuleGetFunction(&fill, m, "fill_f32"), CUDA_SUCCESS);
  CHILD_EQ(cuKernelGetFunction(&kf, kfill), CUDA_SUCCESS);
  CUfunction kf_again = nullptr;
  CHILD_EQ(cuKernelGetFunction(&kf_again, kfill), CUDA_SUCCESS);
  CHILD_CHECK(kf_again == kf);  // one per context
  CHILD_EQ(cuCtxDestroy(c), CUDA_SUCCESS);
  CHILD_CHECK(name_of(fill) == "(refused)");
  CHILD_CHECK(name_of(kf) == "(refused)");
  CHILD_EQ(cuModuleGetFunction(&fill, m, "fill_f32"), CUDA_ERROR_INVALID_HANDLE);  // the module went too
  CHILD_CHECK(cuKernelGetName(&name, knll) == CUDA_SUCCESS &&
              strcmp(name, "nll_loss_forward_reduce_cuda_kernel_2d") == 0);
  CHILD_EQ(cuCtxCreate(&c, nullptr, 0, 0), CUDA_SUCCESS);
  CUfunction nll = nullptr;
  CHILD_EQ(cuKernelGetFunction(&nll, knll), CUDA_SUCCESS);  // the last freed address: kf's
  CHILD_CHECK(nll == kf);
  CHILD_CHECK(name_of(nll) == "nll_loss_forward_reduce_cuda_kernel_2d");
  CHILD_EQ(cuModuleLoadData(&m, "image"), CUDA_SUCCESS);
  CUfunction sleep = nullptr;
  CHILD_EQ(cuModuleGetFunction(&sleep, m, "sleep_us"), CUDA_SUCCESS);  // then fill's
  CHILD_CHECK(sleep == fill);
  CHILD_CHECK(name_of(sleep) == "sleep_us");
  CHILD_EQ(cuCtxDestroy(c), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);

  // 2. cuModuleUnload.
  CHILD_EQ(cuModuleLoadData(&m, "image"), CUDA_SUCCESS);
  CUfunction first = nullptr, second = nullptr;
  CHILD_EQ(cuModuleGetFunction(&first, m, "fill_f32"), CUDA_SUCCESS);
  CHILD_EQ(cuModuleUnload(m), CUDA_SUCCESS);
  CHILD_CHECK(name_of(first) == "(refused)");
  CHILD_EQ(cuModuleLoadData(&m, "image"), CUDA_SUCCESS);
  CHILD_EQ(cuModuleGetFunction(&second, m, "illegal_address"), CUDA_SUCCESS);
  CHILD_CHECK(second == first);
  CHILD_CHECK(name_of(second) == "illegal_address");

  // 3. The last primary release, and a primary reset (the context stays retained, then retained again).
  CHILD_EQ(cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CHILD_CHECK(name_of(second) == "(refused)");
  CHILD_CHECK(child_primary(0) == primary);
  CHILD_EQ(cuModuleLoadData(&m, "image"), CUDA_SUCCESS);
  CUfunction third = nullptr;
  CHILD_EQ(cuModuleGetFunction(&third, m, "indexSelectSmallIndex"), CUDA_SUCCESS);
  CHILD_CHECK(third == second);
  CHILD_EQ(cuDevicePrimaryCtxReset(0), CUDA_SUCCESS);
  CHILD_CHECK(name_of(third) == "(refused)");
  CHILD_CHECK(child_primary(0) == primary);
  CHILD_EQ(cuModuleLoadData(&m, "image"), CUDA_SUCCESS);
  CUfunction fourth = nullptr;
  CHILD_EQ(cuModuleGetFunction(&fourth, m, "fill_f32"), CUDA_SUCCESS);
  CHILD_CHECK(fourth == third);
  CHILD_CHECK(name_of(fourth) == "fill_f32");
  // Library handles are context-independent: they outlive every context above.
  CHILD_CHECK(cuKernelGetName(&name, kfill) == CUDA_SUCCESS && strcmp(name, "fill_f32") == 0);
  child_exit_ok();
}

}  // namespace
}  // namespace sim_test
