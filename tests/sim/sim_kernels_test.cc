// Unit test of the simulated CUDA driver: the named kernels and launches (sim_kernels.cc).
// Part of sim_test; the shared helpers are in sim_test_support.h.

#include "sim_test_support.h"

namespace sim_test {
namespace {

TEST_F(SimTest, KernelsWithoutFaults) {
  CUdeviceptr out = alloc(8 * sizeof(float)), tgt = alloc(8 * sizeof(int64_t));
  const int64_t targets[5] = {0, 2, -100, 4, -100};
  ASSERT_EQ(cuMemcpyHtoD(tgt, targets, sizeof targets), CUDA_SUCCESS);
  auto* fo = reinterpret_cast<float*>(out);
  auto* it = reinterpret_cast<int64_t*>(tgt);
  ASSERT_EQ(k_nll(k, nullptr, fo, it, 5, 5, -100), CUDA_SUCCESS);
  float host[8] = {};
  ASSERT_EQ(cuMemcpyDtoH(host, out, sizeof host), CUDA_SUCCESS);
  EXPECT_TRUE(std::isfinite(host[0]));
  EXPECT_EQ(host[0], 3.0f);  // number of non-ignored targets

  const int64_t index[4] = {3, 0, 1, 3};
  ASSERT_EQ(cuMemcpyHtoD(tgt, index, sizeof index), CUDA_SUCCESS);
  ASSERT_EQ(k_index(k, nullptr, fo, it, 4, 4), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(host, out, sizeof host), CUDA_SUCCESS);
  EXPECT_EQ(host[0], 3.0f);
  EXPECT_EQ(host[1], 0.0f);
  EXPECT_EQ(host[2], 1.0f);
  EXPECT_EQ(host[3], 3.0f);

  ASSERT_EQ(k_fill(k, nullptr, fo, 8, 2.5f), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoH(host, out, sizeof host), CUDA_SUCCESS);
  for (float f : host) EXPECT_EQ(f, 2.5f);
  auto t0 = Clock::now();
  ASSERT_EQ(k_sleep(k, nullptr, 30000), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(30));
}

}  // namespace
}  // namespace sim_test
