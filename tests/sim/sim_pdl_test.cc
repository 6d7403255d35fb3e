// The sim's cuLaunchKernelEx attributes, its PDL oracle (SIM_CUDA_PDL_LOG), arguments in `extra`, and a second
// context (cuCtxCreate). One process: the oracle's file is named before the first PDL launch.
#include <cuda.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

namespace {

std::string g_log;

struct Sim {
  CUmodule mod = nullptr;
  CUfunction fill = nullptr, sleep = nullptr;
  CUstream s = nullptr;
};

Sim& sim() {
  static Sim k = [] {
    Sim k;
    EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
    CUcontext ctx;
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(cuModuleLoadData(&k.mod, "image"), CUDA_SUCCESS);
    EXPECT_EQ(cuModuleGetFunction(&k.fill, k.mod, "fill_f32"), CUDA_SUCCESS);
    EXPECT_EQ(cuModuleGetFunction(&k.sleep, k.mod, "sleep_us"), CUDA_SUCCESS);
    return k;
  }();
  return k;
}

std::vector<std::string> log_lines() {
  std::vector<std::string> out;
  std::ifstream in(g_log);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

CUresult fill(CUstream s, float* p, int32_t n, float v, CUlaunchAttribute* attrs, unsigned nattrs, bool extra = false) {
  CUlaunchConfig c{};
  c.gridDimX = c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = 32, c.blockDimY = c.blockDimZ = 1;
  c.hStream = s;
  c.attrs = attrs;
  c.numAttrs = nattrs;
  CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p);
  if (extra) {
    struct {
      CUdeviceptr p;
      int32_t n;
      float v;
    } buf{d, n, v};
    size_t size = sizeof buf;
    void* x[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    return cuLaunchKernelEx(&c, sim().fill, nullptr, x);
  }
  void* args[] = {&d, &n, &v};
  return cuLaunchKernelEx(&c, sim().fill, args, nullptr);
}

CUlaunchAttribute pdl() {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
  return a;
}

float* device_floats(int n) {
  CUdeviceptr d;
  EXPECT_EQ(cuMemAlloc(&d, sizeof(float) * n), CUDA_SUCCESS);
  return reinterpret_cast<float*>(d);
}

TEST(SimPdl, CountsPdlLaunchesWhosePredecessorIsNotAKernel) {
  Sim& k = sim();
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  float* p = device_floats(16);
  CUlaunchAttribute a = pdl();
  ASSERT_EQ(fill(s, p, 16, 1, &a, 1), CUDA_SUCCESS);  // first on its stream: nothing to overlap, kept
  ASSERT_EQ(fill(s, p, 16, 1, nullptr, 0), CUDA_SUCCESS);
  ASSERT_EQ(fill(s, p, 16, 2, &a, 1), CUDA_SUCCESS);  // after a kernel: kept
  static uint64_t slot;
  ASSERT_EQ(cuMemHostRegister(&slot, sizeof slot, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue64(s, reinterpret_cast<CUdeviceptr>(&slot), 1, 0), CUDA_SUCCESS);
  ASSERT_EQ(fill(s, p, 16, 3, &a, 1), CUDA_SUCCESS);  // after a memop: lost
  CUevent e;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  ASSERT_EQ(fill(s, p, 16, 4, &a, 1), CUDA_SUCCESS);  // after an event record: lost
  CUlaunchAttribute off = pdl();
  off.value.programmaticStreamSerializationAllowed = 0;
  ASSERT_EQ(cuEventRecord(e, s), CUDA_SUCCESS);
  ASSERT_EQ(fill(s, p, 16, 5, &off, 1), CUDA_SUCCESS);  // attribute set to 0: not a PDL launch
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(p[0], 5.0f);
  unsigned long long id = 0;
  ASSERT_EQ(cuStreamGetId(s, &id), CUDA_SUCCESS);
  std::string sid = std::to_string(id);
  EXPECT_EQ(log_lines(), (std::vector<std::string>{sid + " kept none", sid + " kept kernel", sid + " lost memop",
                                                   sid + " lost event"}));
  (void)k;
}

TEST(SimPdl, OtherAttributesPassAndExtraArgumentsWork) {
  Sim& k = sim();
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  float* p = device_floats(8);
  CUevent done;
  ASSERT_EQ(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUlaunchAttribute attrs[5]{};
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attrs[0].value.clusterDim.x = attrs[0].value.clusterDim.y = attrs[0].value.clusterDim.z = 1;
  attrs[1].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
  attrs[1].value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
  attrs[2].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attrs[2].value.cooperative = 1;
  attrs[3].id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
  attrs[3].value.launchCompletionEvent.event = done;
  attrs[4].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
  ASSERT_EQ(fill(s, p, 8, 7, attrs, 5, /*extra*/ true), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(done), CUDA_SUCCESS);  // recorded by the launch itself
  EXPECT_EQ(p[7], 7.0f);
  CUlaunchConfig c{};
  c.gridDimX = c.gridDimY = c.gridDimZ = c.blockDimX = c.blockDimY = c.blockDimZ = 1;
  c.numAttrs = 1;  // but no attrs
  EXPECT_EQ(cuLaunchKernelEx(&c, k.fill, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimPdl, ASecondContextHasItsOwnIdAndWorks) {
  Sim& k = sim();
  CUcontext primary = nullptr, other = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&primary), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate(&other, nullptr, 0, 0), CUDA_SUCCESS);
  CUcontext now = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&now), CUDA_SUCCESS);
  EXPECT_EQ(now, other);
  unsigned long long a = 0, b = 0;
  ASSERT_EQ(cuCtxGetId(primary, &a), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetId(other, &b), CUDA_SUCCESS);
  EXPECT_EQ(a, 1u);
  EXPECT_NE(b, a);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  float* p = device_floats(4);
  // The primary context's function belongs there: not launched on this context's stream.
  EXPECT_EQ(fill(s, p, 4, 3, nullptr, 0), CUDA_ERROR_INVALID_HANDLE);
  CUmodule mod;
  CUfunction fill_here;
  ASSERT_EQ(cuModuleLoadData(&mod, "image"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&fill_here, mod, "fill_f32"), CUDA_SUCCESS);
  CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p);
  int32_t n = 4;
  float v = 3;
  void* args[] = {&d, &n, &v};
  ASSERT_EQ(cuLaunchKernel(fill_here, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(p[0], 3.0f);
  ASSERT_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxDestroy(other), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(other), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy(other), CUDA_ERROR_INVALID_CONTEXT);
  (void)k;
}

}  // namespace

int main(int argc, char** argv) {
  char dir[] = "/tmp/sim_pdl_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  g_log = std::string(dir) + "/pdl.log";
  setenv("SIM_CUDA_PDL_LOG", g_log.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  unlink(g_log.c_str());
  rmdir(dir);
  return rc;
}
