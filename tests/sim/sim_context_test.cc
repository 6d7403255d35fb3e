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

}  // namespace
}  // namespace sim_test
