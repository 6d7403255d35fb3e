// cupti_tracer unit tests: synthetic CUpti_CallbackData fed to the decoder (the
// parameter blocks are the real generated_cuda_meta.h structs, so a layout the
// decoder got wrong shows here), and libcupti discovery over fake directory
// layouts in a temporary folder.
#include <cupti.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cupti_tracer/decode.h"
#include "cupti_tracer/discovery.h"

namespace cdsa::cupti {
namespace {

CUpti_CallbackData exit_data(const void* params, CUresult* rv, const char* symbol = nullptr) {
  CUpti_CallbackData d{};
  d.callbackSite = CUPTI_API_EXIT;
  d.functionName = "cuLaunchKernel";
  d.functionParams = params;
  d.functionReturnValue = rv;
  d.symbolName = symbol;
  return d;
}

// Feeds a parameter block to the decoder as CUPTI's API-exit callback of a call that succeeded.
class Decode : public ::testing::Test {
 protected:
  // The number of launches decoded into li_ (at most `max`).
  int decode(uint32_t cbid, const void* params, int max = 1) {
    d_ = exit_data(params, &rv_);
    return decode_launches(cbid, d_, li_, max);
  }
  CUresult rv_ = CUDA_SUCCESS;
  CUpti_CallbackData d_{};
  LaunchInfo li_[3];
};

void expect_geometry(const LaunchInfo& li, const std::array<unsigned, 3>& grid, const std::array<unsigned, 3>& block,
                     unsigned shared_mem) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(li.grid[i], grid[i]) << "grid[" << i << "]";
    EXPECT_EQ(li.block[i], block[i]) << "block[" << i << "]";
  }
  EXPECT_EQ(li.shared_mem, shared_mem);
}

TEST_F(Decode, LaunchCbidsAreTheDriverHeaders) {
  for (uint32_t cbid : std::initializer_list<uint32_t>{
           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
           CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
           CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel})
    EXPECT_TRUE(is_launch_cbid(cbid)) << cbid;
  for (uint32_t cbid : std::initializer_list<uint32_t>{CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
                                                       CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc, 0})
    EXPECT_FALSE(is_launch_cbid(cbid)) << cbid;
}

TEST_F(Decode, LaunchKernelGridBlockStream) {
  cuLaunchKernel_params p{};
  p.f = reinterpret_cast<CUfunction>(0x1234);
  p.gridDimX = 4, p.gridDimY = 5, p.gridDimZ = 6;
  p.blockDimX = 32, p.blockDimY = 2, p.blockDimZ = 1;
  p.sharedMemBytes = 1024;
  p.hStream = reinterpret_cast<CUstream>(0x5678);
  ASSERT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, 2), 1);
  EXPECT_EQ(li_[0].kind, LaunchKind::Kernel);
  EXPECT_EQ(li_[0].func, p.f);
  EXPECT_EQ(li_[0].stream, p.hStream);
  EXPECT_FALSE(li_[0].per_thread);
  expect_geometry(li_[0], {4, 5, 6}, {32, 2, 1}, 1024);
  EXPECT_EQ(launch_function(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, d_), p.f);

  ASSERT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, &p, 2), 1);
  EXPECT_TRUE(li_[0].per_thread);
  EXPECT_EQ(li_[0].grid[2], 6u);
}

TEST_F(Decode, LaunchKernelExReadsTheConfigAndCooperativeAttribute) {
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  attr.value.cooperative = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = 7, cfg.gridDimY = 1, cfg.gridDimZ = 2;
  cfg.blockDimX = 128, cfg.blockDimY = 1, cfg.blockDimZ = 1;
  cfg.sharedMemBytes = 48;
  cfg.hStream = reinterpret_cast<CUstream>(0x99);
  cuLaunchKernelEx_params p{};
  p.config = &cfg;
  p.f = reinterpret_cast<CUfunction>(0x42);
  ASSERT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, &p), 1);
  EXPECT_EQ(li_[0].kind, LaunchKind::KernelEx);
  EXPECT_TRUE(li_[0].per_thread);
  EXPECT_EQ(li_[0].func, p.f);
  EXPECT_EQ(li_[0].stream, cfg.hStream);
  expect_geometry(li_[0], {7, 1, 2}, {128, 1, 1}, 48);

  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  ASSERT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, &p), 1);
  EXPECT_EQ(li_[0].kind, LaunchKind::Cooperative);
  EXPECT_FALSE(li_[0].per_thread);

  p.config = nullptr;  // a malformed block: not a launch, no crash
  EXPECT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, &p), 0);
}

TEST_F(Decode, GraphLaunchHasNoFunction) {
  cuGraphLaunch_params p{};
  p.hGraph = reinterpret_cast<CUgraphExec>(0xabc);
  p.hStream = reinterpret_cast<CUstream>(0xdef);
  ASSERT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, &p), 1);
  EXPECT_EQ(li_[0].kind, LaunchKind::Graph);
  EXPECT_EQ(li_[0].graph_exec, p.hGraph);
  EXPECT_EQ(li_[0].stream, p.hStream);
  EXPECT_EQ(li_[0].func, nullptr);
  EXPECT_TRUE(li_[0].per_thread);
  EXPECT_EQ(launch_function(CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, d_), nullptr);
}

TEST_F(Decode, CooperativeAndMultiDevice) {
  cuLaunchCooperativeKernel_params p{};
  p.f = reinterpret_cast<CUfunction>(0x77);
  p.gridDimX = 3, p.gridDimY = 1, p.gridDimZ = 1, p.blockDimX = 64, p.blockDimY = 1, p.blockDimZ = 1;
  p.hStream = reinterpret_cast<CUstream>(0x11);
  ASSERT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz, &p, 3), 1);
  EXPECT_EQ(li_[0].kind, LaunchKind::Cooperative);
  expect_geometry(li_[0], {3, 1, 1}, {64, 1, 1}, 0);
  EXPECT_TRUE(li_[0].per_thread);

  CUDA_LAUNCH_PARAMS lp[2]{};
  lp[0].function = reinterpret_cast<CUfunction>(0x1);
  lp[0].gridDimX = 2;
  lp[1].function = reinterpret_cast<CUfunction>(0x2);
  lp[1].gridDimX = 9;
  lp[1].hStream = reinterpret_cast<CUstream>(0x22);
  cuLaunchCooperativeKernelMultiDevice_params m{};
  m.launchParamsList = lp;
  m.numDevices = 2;
  ASSERT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice, &m, 3), 2);
  EXPECT_EQ(li_[1].func, lp[1].function);
  EXPECT_EQ(li_[1].grid[0], 9u);
  EXPECT_EQ(li_[1].stream, lp[1].hStream);
  EXPECT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice, &m, 1), 1);
}

TEST_F(Decode, LegacyLaunchGrid) {
  cuLaunchGridAsync_params p{};
  p.f = reinterpret_cast<CUfunction>(0x5);
  p.grid_width = 8;
  p.grid_height = 3;
  p.hStream = reinterpret_cast<CUstream>(0x6);
  ASSERT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync, &p), 1);
  EXPECT_EQ(li_[0].grid[0], 8u);
  EXPECT_EQ(li_[0].grid[1], 3u);
  EXPECT_EQ(li_[0].stream, p.hStream);
}

TEST_F(Decode, NonLaunchAndMissingParams) {
  EXPECT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, nullptr), 0);
  cuMemcpyDtoH_v2_params m{};
  EXPECT_EQ(decode(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, &m), 0);
  EXPECT_EQ(launch_function(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, d_), nullptr);
  EXPECT_EQ(decode_launches(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, d_, nullptr, 1), 0);
}

// The teardowns (a probe before each) and the recapture (a capture into an existing graph's nodes) by their ids.
TEST_F(Decode, TeardownAndRecaptureCalls) {
  for (uint32_t cbid : {CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2, CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2,
                        CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2, CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy})
    EXPECT_TRUE(is_teardown_cbid(cbid)) << cbid;
  EXPECT_FALSE(is_teardown_cbid(CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain));
  bool per_thread = true;
  EXPECT_EQ(capture_call(kCbBeginRecapture, &per_thread), CaptureCall::Recapture);
  EXPECT_FALSE(per_thread);
  EXPECT_EQ(capture_call(kCbBeginRecapturePtsz, &per_thread), CaptureCall::Recapture);
  EXPECT_TRUE(per_thread);
  struct {
    CUstream h;
    CUstreamCaptureMode mode;
    CUgraph g;
    void* cb;
    void* user;
  } p{reinterpret_cast<CUstream>(0x11), CU_STREAM_CAPTURE_MODE_GLOBAL, reinterpret_cast<CUgraph>(0x22), nullptr,
      nullptr};
  d_ = exit_data(&p, &rv_);
  EXPECT_EQ(capture_stream(d_), reinterpret_cast<CUstream>(0x11));
  EXPECT_EQ(recapture_graph(d_), reinterpret_cast<CUgraph>(0x22));
}

TEST_F(Decode, ExitResultOnlyAtExit) {
  CUresult rv = CUDA_ERROR_ASSERT;
  CUpti_CallbackData d = exit_data(nullptr, &rv);
  EXPECT_EQ(exit_result(d), CUDA_ERROR_ASSERT);
  rv = CUDA_ERROR_ILLEGAL_ADDRESS;
  EXPECT_EQ(exit_result(d), CUDA_ERROR_ILLEGAL_ADDRESS);
  d.callbackSite = CUPTI_API_ENTER;
  EXPECT_EQ(exit_result(d), CUDA_SUCCESS);
  d.callbackSite = CUPTI_API_EXIT;
  d.functionReturnValue = nullptr;
  EXPECT_EQ(exit_result(d), CUDA_SUCCESS);
}

// ---------------------------------------------------------------- discovery
class Discovery : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cdsa-cupti-discovery-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string touch(const std::string& rel) {
    std::filesystem::path p = root_ + "/" + rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << "x";
    return p.string();
  }
  std::string at(const std::string& rel) const { return root_ + "/" + rel; }
  std::vector<std::string> at(std::initializer_list<std::string> rels) const {
    std::vector<std::string> v;
    for (const std::string& r : rels) v.push_back(at(r));
    return v;
  }
  SearchInputs inputs() {
    SearchInputs in;
    in.default_toolkit = at("no-default-toolkit");
    return in;
  }
  // CUDA_HOME pinned to a toolkit folder: no bare sonames at the end of the candidates.
  SearchInputs pinned_inputs(std::vector<std::string> loaded) {
    SearchInputs in = inputs();
    in.loaded = std::move(loaded);
    in.cuda_home = at("toolkit");
    return in;
  }
  std::string root_;
};

TEST_F(Discovery, Cu13WheelNextToLoadedTorch) {
  std::string sp = "venv/lib/python3.12/site-packages";
  std::string torch = touch(sp + "/torch/lib/libtorch_cuda.so");
  std::string cupti = touch(sp + "/nvidia/cu13/lib/libcupti.so.13");
  touch(sp + "/nvidia/cuda_cupti/lib/libcupti.so.12");
  auto c = cupti_candidates(pinned_inputs({"/lib/x86_64-linux-gnu/libc.so.6", torch}));
  EXPECT_EQ(c, at({sp + "/nvidia/cu13/lib/libcupti.so.13", sp + "/nvidia/cuda_cupti/lib/libcupti.so.12"}));
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], cupti);
}

TEST_F(Discovery, Cu12WheelNextToLoadedCudart) {
  std::string cudart = touch("env/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12");
  touch("env/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12");
  EXPECT_EQ(cupti_candidates(pinned_inputs({cudart})), at({"env/site-packages/nvidia/cuda_cupti/lib/libcupti.so.12"}));
}

TEST_F(Discovery, SameFolderAsLoadedCudartInCu13Layout) {
  std::string cudart = touch("sp/nvidia/cu13/lib/libcudart.so.13");
  touch("sp/nvidia/cu13/lib/libcupti.so.13");
  SearchInputs in = pinned_inputs({cudart});
  auto dirs = cupti_search_dirs(in);
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs[0], at("sp/nvidia/cu13/lib"));
  // The folder is found twice (itself, and as a wheel layout) but listed once.
  EXPECT_EQ(cupti_candidates(in), at({"sp/nvidia/cu13/lib/libcupti.so.13"}));
}

TEST_F(Discovery, UnrelatedLoadedLibrariesAreNotSearched) {
  std::string other = touch("other/lib/libfoo.so");
  touch("other/nvidia/cu13/lib/libcupti.so.13");
  EXPECT_TRUE(cupti_candidates(pinned_inputs({other})).empty());
}

TEST_F(Discovery, PythonPathSitePackages) {
  touch("pp/nvidia/cu13/lib/libcupti.so.13");
  touch("conda/lib/libcupti.so.13");
  SearchInputs in = pinned_inputs({});
  in.python_dirs = at({"missing", "pp", "conda/lib"});
  EXPECT_EQ(cupti_candidates(in), at({"pp/nvidia/cu13/lib/libcupti.so.13", "conda/lib/libcupti.so.13"}));
}

TEST_F(Discovery, ToolkitLayoutsAfterWheels) {
  std::string cudart = touch("sp/nvidia/cu13/lib/libcudart.so.13");
  touch("sp/nvidia/cu13/lib/libcupti.so.13");
  touch("toolkit/extras/CUPTI/lib64/libcupti.so.12");
  // The toolkit's folder for this architecture's libraries (base/arch.h: x86_64-linux, sbsa-linux on aarch64).
  const std::string targets = std::string("toolkit/targets/") + arch::kCudaTargetName + "/lib/libcupti.so.13";
  touch(targets);
  touch("toolkit/lib64/libcupti.so");
  EXPECT_EQ(cupti_candidates(pinned_inputs({cudart})),
            at({"sp/nvidia/cu13/lib/libcupti.so.13", "toolkit/lib64/libcupti.so",
                "toolkit/extras/CUPTI/lib64/libcupti.so.12", targets}));
}

TEST_F(Discovery, DefaultToolkitAndLoaderSearchOnlyWhenCudaHomeUnset) {
  touch("default/lib64/libcupti.so.13");
  SearchInputs in = inputs();
  in.default_toolkit = at("default");
  EXPECT_EQ(cupti_candidates(in),
            (std::vector<std::string>{at("default/lib64/libcupti.so.13"), "libcupti.so.13", "libcupti.so.12"}));

  in.cuda_home = at("nonexistent");  // pinned to a toolkit without CUPTI: nothing at all
  EXPECT_TRUE(cupti_candidates(in).empty());
  EXPECT_EQ(join_dirs(cupti_search_dirs(in)), "(no candidate folder exists)");
}

TEST_F(Discovery, CurrentInputsReadTheEnvironment) {
  std::string pp = touch("pp2/marker");
  ASSERT_EQ(setenv("CUDA_HOME", (root_ + "/cudahome").c_str(), 1), 0);
  ASSERT_EQ(setenv("PYTHONPATH", (root_ + "/pp2:" + root_ + "/pp3").c_str(), 1), 0);
  SearchInputs in = current_search_inputs();
  unsetenv("CUDA_HOME");
  unsetenv("PYTHONPATH");
  EXPECT_EQ(in.cuda_home, root_ + "/cudahome");
  ASSERT_GE(in.python_dirs.size(), 2u);
  EXPECT_EQ(in.python_dirs[0], root_ + "/pp2");
  EXPECT_EQ(in.python_dirs[1], root_ + "/pp3");
  bool saw_libc = false;
  for (const auto& l : in.loaded) saw_libc |= l.find("libc.so") != std::string::npos;
  EXPECT_TRUE(saw_libc);
}

TEST(JoinDirs, Truncates) {
  std::vector<std::string> d(100, "/some/long/folder/name");
  std::string s = join_dirs(d, 60);
  EXPECT_LE(s.size(), 90u);
  EXPECT_NE(s.find("..."), std::string::npos);
}

}  // namespace
}  // namespace cdsa::cupti
