// Unit test of the simulated CUDA driver: modules, libraries, CUfunction/CUkernel handles (sim_modules.cc).
// Part of sim_test; the shared helpers are in sim_test_support.h.

#include "sim_test_support.h"

namespace sim_test {
namespace {

TEST_F(SimTest, ModulesFunctionsAndLaunchValidation) {
  const char* name = nullptr;
  ASSERT_EQ(cuFuncGetName(&name, k.nll), CUDA_SUCCESS);
  EXPECT_STREQ(name, "nll_loss_forward_reduce_cuda_kernel_2d");
  ASSERT_EQ(cuFuncGetName(&name, k.index), CUDA_SUCCESS);
  EXPECT_STREQ(name, "indexSelectSmallIndex");
  ASSERT_EQ(cuFuncGetName(&name, k.sleep), CUDA_SUCCESS);
  EXPECT_STREQ(name, "sleep_us");

  CUfunction f = nullptr;
  EXPECT_EQ(cuModuleGetFunction(&f, k.mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  // A mangled name that contains a known kernel name: same behaviour, name as given.
  ASSERT_EQ(cuModuleGetFunction(&f, k.mod, "_Z8fill_f32Pfif"), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetName(&name, f), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_Z8fill_f32Pfif");
  CUdeviceptr buf = alloc(4 * sizeof(float));
  int32_t n = 4;
  float v = 1.5f;
  void* args[] = {&buf, &n, &v};
  ASSERT_EQ(cuLaunchKernel(f, 2, 1, 1, 64, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<float*>(buf)[3], 1.5f);

  // cuLaunchKernelEx.
  v = 2.5f;
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 128;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.hStream = CU_STREAM_PER_THREAD;
  ASSERT_EQ(cuLaunchKernelEx(&cfg, k.fill, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<float*>(buf)[0], 2.5f);
  EXPECT_EQ(cuLaunchKernelEx(nullptr, k.fill, args, nullptr), CUDA_ERROR_INVALID_VALUE);

  // Arguments through CU_LAUNCH_PARAM_BUFFER_POINTER.
  struct {
    CUdeviceptr p;
    int32_t n;
    float v;
  } packed{buf, 4, 3.5f};
  size_t size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  ASSERT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
  // cuLaunchCooperativeKernel.
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<float*>(buf)[2], 3.5f);
  v = 4.5f;
  ASSERT_EQ(cuLaunchCooperativeKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, nullptr, args), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<float*>(buf)[1], 4.5f);

  EXPECT_EQ(cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(&buf), 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(k.fill, 0, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 2048, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUstream bogus = reinterpret_cast<CUstream>(&buf);
  EXPECT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, bogus, args, nullptr), CUDA_ERROR_INVALID_HANDLE);

  CUmodule m2 = nullptr;
  ASSERT_EQ(cuModuleLoadData(&m2, "x"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&f, m2, "fill_f32"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleUnload(m2), CUDA_SUCCESS);
  EXPECT_EQ(cuFuncGetName(&name, f), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleGetFunction(&f, m2, "fill_f32"), CUDA_ERROR_INVALID_HANDLE);
}

// cudart 12+/13 path: cuLibraryLoadData + cuLibraryGetKernel, the CUkernel
// launched cast to CUfunction; cuBLASLt's: cuKernelGetFunction.
TEST_F(SimTest, LibraryKernelsAreTheirOwnHandleKind) {
  CUlibrary lib = nullptr;
  static const char image[] = "fatbin";
  ASSERT_EQ(cuLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CUkernel kern = nullptr, again = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&kern, lib, "_Z8fill_f32Pfif"), CUDA_SUCCESS);  // mangled: contains fill_f32
  ASSERT_EQ(cuLibraryGetKernel(&again, lib, "_Z8fill_f32Pfif"), CUDA_SUCCESS);
  EXPECT_EQ(kern, again);
  CUkernel none = nullptr;
  EXPECT_EQ(cuLibraryGetKernel(&none, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);

  const char* name = nullptr;
  EXPECT_EQ(cuFuncGetName(&name, reinterpret_cast<CUfunction>(kern)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cuKernelGetName(&name, kern), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_Z8fill_f32Pfif");
  EXPECT_EQ(cuKernelGetName(&name, reinterpret_cast<CUkernel>(k.fill)), CUDA_ERROR_INVALID_HANDLE);

  CUdeviceptr buf = alloc(8 * sizeof(float));
  auto* fb = reinterpret_cast<float*>(buf);
  int32_t n = 8;
  float v = 5.0f;
  void* args[] = {&buf, &n, &v};
  ASSERT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(kern), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(fb[i], 5.0f);

  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32, cfg.blockDimY = cfg.blockDimZ = 1;
  v = 6.0f;
  ASSERT_EQ(cuLaunchKernelEx(&cfg, reinterpret_cast<CUfunction>(kern), args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fb[7], 6.0f);

  // cuKernelGetFunction: a CUfunction that cuFuncGetName names and that launches.
  CUfunction f = nullptr, f2 = nullptr;
  ASSERT_EQ(cuKernelGetFunction(&f, kern), CUDA_SUCCESS);
  ASSERT_EQ(cuKernelGetFunction(&f2, kern), CUDA_SUCCESS);
  EXPECT_EQ(f, f2);
  EXPECT_NE(reinterpret_cast<void*>(f), reinterpret_cast<void*>(kern));
  ASSERT_EQ(cuFuncGetName(&name, f), CUDA_SUCCESS);
  EXPECT_STREQ(name, "_Z8fill_f32Pfif");
  EXPECT_EQ(cuKernelGetName(&name, reinterpret_cast<CUkernel>(f)), CUDA_ERROR_INVALID_HANDLE);
  v = 7.0f;
  ASSERT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fb[0], 7.0f);
  EXPECT_EQ(cuKernelGetFunction(&f2, reinterpret_cast<CUkernel>(k.fill)), CUDA_ERROR_INVALID_HANDLE);

  // Unloading the library invalidates its kernels and their functions.
  ASSERT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(kern), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelGetName(&name, kern), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLibraryLoadData(&lib, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

// cuModuleLoad and cuLibraryLoadFromFile: any readable file is an image.
TEST_F(SimTest, LoadFromPath) {
  char path[] = "/tmp/sim_test_cubin_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "cubin", 5), 5);
  close(fd);
  CUmodule mod = nullptr;
  ASSERT_EQ(cuModuleLoad(&mod, path), CUDA_SUCCESS);
  CUfunction f = nullptr;
  ASSERT_EQ(cuModuleGetFunction(&f, mod, "sleep_us"), CUDA_SUCCESS);
  const char* name = nullptr;
  ASSERT_EQ(cuFuncGetName(&name, f), CUDA_SUCCESS);
  EXPECT_STREQ(name, "sleep_us");
  EXPECT_EQ(cuModuleUnload(mod), CUDA_SUCCESS);
  CUlibrary lib = nullptr;
  ASSERT_EQ(cuLibraryLoadFromFile(&lib, path, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
  unlink(path);
  EXPECT_EQ(cuModuleLoad(&mod, path), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuModuleLoad(&mod, "/tmp"), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuLibraryLoadFromFile(&lib, path, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuModuleLoad(nullptr, path), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace sim_test
