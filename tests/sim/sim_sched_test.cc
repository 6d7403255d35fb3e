// Unit test of the simulated CUDA driver: the seeded scheduler (SIM_CUDA_SCHED_SEED: kernel durations, memop delays,
// PDL secondaries beside their primary) and the fault log (SIM_CUDA_FAULT_LOG), sim_sched.cc and the stream worker.
// Part of sim_test; the shared helpers are in sim_test_support.h.
//
// The seeds below were chosen for what their numbers make happen (sched_delay_us: a function of the seed, the
// stream's id and the item's place on it). The first stream a child creates has id 1000.

#include <fstream>

#include "sim_test_support.h"

namespace sim_test {
namespace {

CUlaunchAttribute pdl_attribute() {
  CUlaunchAttribute a{};
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.programmaticStreamSerializationAllowed = 1;
  return a;
}

// fill_f32(p, n, v) on `s` by cuLaunchKernelEx, with programmatic stream serialization when `pdl`.
CUresult fill_ex(const Kernels& k, CUstream s, float* p, int32_t n, float v, bool pdl) {
  CUlaunchConfig c{};
  c.gridDimX = c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = 32, c.blockDimY = c.blockDimZ = 1;
  c.hStream = s;
  CUlaunchAttribute a = pdl_attribute();
  c.attrs = pdl ? &a : nullptr;
  c.numAttrs = pdl ? 1 : 0;
  CUdeviceptr d = reinterpret_cast<CUdeviceptr>(p);
  void* args[] = {&d, &n, &v};
  return cuLaunchKernelEx(&c, k.fill, args, nullptr);
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string temp_path(const char* name) {
  char dir[] = "/tmp/sim_sched_XXXXXX";
  CHILD_CHECK(mkdtemp(dir) != nullptr);
  return std::string(dir) + "/" + name;
}

// What comes between a PDL secondary and the mark after it.
enum class Between { Nothing, EventRecord, NotPdl };

// Seed 24, kernels and delays up to 200 ms, stream 1000: the faulting primary (item 1) runs 170 ms, the secondary
// (item 2) 9 ms, the mark (item 3) waits 40 ms. With nothing between, the secondary starts beside the primary and
// the mark waits for the secondary only: it lands at ~50 ms, while the primary still runs, then the primary faults.
// An event record between makes the mark wait for both (it then never lands: the context dies first); so does a
// secondary without the attribute, or one that does not follow a kernel.
void mark_after_secondary(Between between) {
  setenv("SIM_CUDA_SCHED_SEED", "24", 1);
  setenv("SIM_CUDA_SCHED_MAX_US", "200000", 1);
  const std::string pdl_log = temp_path("pdl.log"), fault_log = temp_path("fault.log");
  setenv("SIM_CUDA_PDL_LOG", pdl_log.c_str(), 1);
  setenv("SIM_CUDA_FAULT_LOG", fault_log.c_str(), 1);
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  alignas(64) static uint32_t mark[1];
  CHILD_EQ(cuMemHostRegister(mark, sizeof mark, 0), CUDA_SUCCESS);
  const int64_t bad[5] = {0, 1, -100, 7, 9};
  CUdeviceptr out = child_alloc(64), tgt = child_copy_to_device(bad);
  CUstream s = child_stream();
  CHILD_EQ(id_of(cuStreamGetId, s), 1000u);
  const auto t0 = Clock::now();
  CHILD_EQ(k_nll(k, s, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(tgt), 5, 5, -100), CUDA_SUCCESS);
  CHILD_EQ(fill_ex(k, s, reinterpret_cast<float*>(out) + 8, 4, 3.0f, between != Between::NotPdl), CUDA_SUCCESS);
  if (between == Between::EventRecord) {
    CUevent ev;
    CHILD_EQ(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    CHILD_EQ(cuEventRecord(ev, s), CUDA_SUCCESS);
  }
  CHILD_EQ(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(&mark[0]), 1, 0), CUDA_SUCCESS);
  const bool landed = wait_until([] { return load(&mark[0]) == 1u; }, std::chrono::milliseconds(120));
  const CUresult then = cuStreamQuery(s);
  if (between == Between::Nothing) {
    CHILD_CHECK(landed);                   // before the primary ended ...
    CHILD_EQ(then, CUDA_ERROR_NOT_READY);  // ... which still runs
    CHILD_CHECK(Clock::now() - t0 < std::chrono::milliseconds(150));
    CHILD_CHECK(reinterpret_cast<float*>(out)[8] == 3.0f);  // the secondary ran
  } else {
    CHILD_CHECK(!landed);
  }
  CHILD_EQ(cuStreamSynchronize(s), CUDA_ERROR_ASSERT);  // then the primary faults
  CHILD_CHECK(Clock::now() - t0 >= std::chrono::milliseconds(150));
  CHILD_EQ(load(&mark[0]), between == Between::Nothing ? 1u : 0u);
  CHILD_STDERR(cap, kNllLine);
  // The fault log names the faulting launch; the PDL oracle still counts the secondary.
  CHILD_CHECK(lines_of(fault_log) ==
              std::vector<std::string>{"1 1000 nll_loss_forward_reduce_cuda_kernel_2d grid 1 1 1 710"});
  if (between == Between::NotPdl)
    CHILD_CHECK(lines_of(pdl_log).empty());
  else
    CHILD_CHECK(lines_of(pdl_log) == std::vector<std::string>{"1000 kept kernel"});
  child_exit_ok();
}

SIM_CHILD_TEST(SeededAMarkAfterAPdlSecondaryLandsBeforeItsPrimaryFaults) { mark_after_secondary(Between::Nothing); }
SIM_CHILD_TEST(SeededAnEventRecordAfterTheSecondaryMakesTheMarkWaitForBoth) {
  mark_after_secondary(Between::EventRecord);
}
SIM_CHILD_TEST(SeededWithoutTheAttributeTheMarkWaitsForThePrimary) { mark_after_secondary(Between::NotPdl); }

// The secondary overlaps only the kernel right before it: after a memop it is not a secondary of anything.
SIM_CHILD_TEST(SeededASecondaryAfterAMemopDoesNotOverlap) {
  setenv("SIM_CUDA_SCHED_SEED", "24", 1);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  alignas(64) static uint32_t mark[2];
  CHILD_EQ(cuMemHostRegister(mark, sizeof mark, 0), CUDA_SUCCESS);
  CUdeviceptr out = child_alloc(64);
  CUstream s = child_stream();
  CHILD_EQ(k_sleep(k, s, 150000), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(&mark[1]), 1, 0), CUDA_SUCCESS);
  CHILD_EQ(fill_ex(k, s, reinterpret_cast<float*>(out), 4, 3.0f, true), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(&mark[0]), 1, 0), CUDA_SUCCESS);
  CHILD_CHECK(!wait_until([] { return load(&mark[0]) == 1u; }, std::chrono::milliseconds(100)));
  CHILD_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  CHILD_EQ(load(&mark[0]), 1u);
  child_exit_ok();
}

// A chain of PDL secondaries: each may start beside the one before; a mark after the chain waits for its last only,
// an event record after the chain for all of it.
SIM_CHILD_TEST(SeededAPdlChainRunsBesideItsPrimary) {
  setenv("SIM_CUDA_SCHED_SEED", "24", 1);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  alignas(64) static uint32_t mark[2];
  CHILD_EQ(cuMemHostRegister(mark, sizeof mark, 0), CUDA_SUCCESS);
  CUdeviceptr out = child_alloc(64);
  float* f = reinterpret_cast<float*>(out);
  CUstream s = child_stream();
  CHILD_EQ(k_sleep(k, s, 200000), CUDA_SUCCESS);
  for (int i = 0; i < 5; ++i) CHILD_EQ(fill_ex(k, s, f + i, 1, static_cast<float>(i + 1), true), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(&mark[0]), 1, 0), CUDA_SUCCESS);
  CUevent ev;
  CHILD_EQ(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CHILD_EQ(cuEventRecord(ev, s), CUDA_SUCCESS);
  CHILD_EQ(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(&mark[1]), 1, 0), CUDA_SUCCESS);
  CHILD_CHECK(wait_until([] { return load(&mark[0]) == 1u; }, std::chrono::milliseconds(150)));
  CHILD_EQ(cuEventQuery(ev), CUDA_ERROR_NOT_READY);  // the sleep still runs
  CHILD_EQ(load(&mark[1]), 0u);
  for (int i = 0; i < 5; ++i) CHILD_CHECK(f[i] == static_cast<float>(i + 1));
  CHILD_EQ(cuEventSynchronize(ev), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  CHILD_EQ(load(&mark[1]), 1u);
  child_exit_ok();
}

// Seeded kernel durations change the order in which streams finish: 16 streams, one kernel and one mark each,
// submitted in order, do not finish in order.
SIM_CHILD_TEST(SeededStreamsFinishOutOfOrder) {
  setenv("SIM_CUDA_SCHED_SEED", "7", 1);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  constexpr int kStreams = 16;
  alignas(64) static uint32_t marks[kStreams];
  CHILD_EQ(cuMemHostRegister(marks, sizeof marks, 0), CUDA_SUCCESS);
  CUdeviceptr out = child_alloc(kStreams * 4);
  CUstream s[kStreams];
  for (auto& x : s) x = child_stream();
  for (int i = 0; i < kStreams; ++i) {
    CHILD_EQ(k_fill(k, s[i], reinterpret_cast<float*>(out) + i, 1, 1.0f), CUDA_SUCCESS);
    CHILD_EQ(cuStreamWriteValue32(s[i], reinterpret_cast<CUdeviceptr>(&marks[i]), 1, 0), CUDA_SUCCESS);
  }
  std::vector<int> order;
  CHILD_CHECK(wait_until(
      [&] {
        for (int i = 0; i < kStreams; ++i)
          if (load(&marks[i]) == 1u && std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
        return order.size() == kStreams;
      },
      std::chrono::seconds(5)));
  CHILD_CHECK(!std::is_sorted(order.begin(), order.end()));
  CHILD_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  child_exit_ok();
}

// Marks land late (each waits a seeded 0-2 ms) but in stream order: a landed mark's predecessors have landed.
SIM_CHILD_TEST(SeededMarksLandLateInStreamOrder) {
  setenv("SIM_CUDA_SCHED_SEED", "3", 1);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  constexpr int kMarks = 40;
  alignas(64) static uint32_t marks[kMarks];
  CHILD_EQ(cuMemHostRegister(marks, sizeof marks, 0), CUDA_SUCCESS);
  CUstream s = child_stream();
  const auto t0 = Clock::now();
  for (int i = 0; i < kMarks; ++i)
    CHILD_EQ(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(&marks[i]), 1, 0), CUDA_SUCCESS);
  bool in_order = true;
  CHILD_CHECK(wait_until(
      [&] {
        int landed = 0;
        for (int i = kMarks - 1; i >= 0; --i) {
          if (load(&marks[i]) != 1u) continue;
          for (int j = 0; j < i; ++j) in_order &= load(&marks[j]) == 1u;
          landed = i + 1;
          break;
        }
        return landed == kMarks;
      },
      std::chrono::seconds(5)));
  CHILD_CHECK(in_order);
  CHILD_CHECK(Clock::now() - t0 >= std::chrono::milliseconds(10));  // 40 delays of 0-2 ms
  CHILD_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  child_exit_ok();
}

// The fault log: one line per faulting launch, "<context id> <stream id> <kernel name> grid <x> <y> <z> <code>",
// from plain launches and graph replays, in each context.
SIM_CHILD_TEST(TheFaultLogNamesEachFaultingLaunch) {
  const std::string log = temp_path("fault.log");
  setenv("SIM_CUDA_FAULT_LOG", log.c_str(), 1);
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  const int64_t bad[5] = {0, 1, -100, 7, 9};
  const int64_t bad_index[3] = {0, 9, 1};
  CUdeviceptr out = child_alloc(64), tgt = child_copy_to_device(bad), idx = child_copy_to_device(bad_index);
  // Context 1 (primary): an nll launch with grid (77, 1, 1) on a created stream.
  CUstream s1 = child_stream();
  CUdeviceptr o = out, t = tgt;
  int32_t n = 5, classes = 5;
  int64_t ignore = -100;
  void* nll_args[] = {&o, &t, &n, &classes, &ignore};
  CHILD_EQ(cuLaunchKernel(k.nll, 77, 1, 1, 32, 1, 1, 0, s1, nll_args, nullptr), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(s1), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);  // away from the dead context
  // Context 2: illegal_address, grid (5, 2, 3), on its legacy stream.
  CUcontext c2 = nullptr;
  CHILD_EQ(cuCtxCreate(&c2, nullptr, 0, 0), CUDA_SUCCESS);
  Kernels k2;
  CHILD_EQ(load_kernels(k2), CUDA_SUCCESS);
  CHILD_EQ(cuLaunchKernel(k2.illegal, 5, 2, 3, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  CHILD_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  CHILD_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  // Context 3: an indexSelectSmallIndex node, grid (9, 1, 1), replayed from a captured graph.
  CUcontext c3 = nullptr;
  CHILD_EQ(cuCtxCreate(&c3, nullptr, 0, 0), CUDA_SUCCESS);
  Kernels k3;
  CHILD_EQ(load_kernels(k3), CUDA_SUCCESS);
  CUstream s3 = child_stream();
  CHILD_EQ(cuStreamBeginCapture(s3, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr i3 = idx;
  int32_t n3 = 3, src = 4;
  void* index_args[] = {&o, &i3, &n3, &src};
  CHILD_EQ(cuLaunchKernel(k3.index, 9, 1, 1, 32, 1, 1, 0, s3, index_args, nullptr), CUDA_SUCCESS);
  CUgraph g;
  CHILD_EQ(cuStreamEndCapture(s3, &g), CUDA_SUCCESS);
  CUgraphExec x;
  CHILD_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  CHILD_EQ(cuGraphLaunch(x, s3), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(s3), CUDA_ERROR_ASSERT);
  CHILD_CHECK(lines_of(log) == (std::vector<std::string>{
                                   "1 1000 nll_loss_forward_reduce_cuda_kernel_2d grid 77 1 1 710",
                                   "2 1001 illegal_address grid 5 2 3 700",
                                   "3 1002 indexSelectSmallIndex grid 9 1 1 710",
                               }));
  child_exit_ok();
}

// Without a seed (this process: SIM_CUDA_SCHED_SEED unset) a PDL secondary waits for its primary, as before.
TEST_F(SimTest, WithoutASeedAPdlSecondaryWaitsForItsPrimary) {
  alignas(64) static uint32_t mark;
  mark = 0;
  ASSERT_EQ(cuMemHostRegister(&mark, sizeof mark, 0), CUDA_SUCCESS);
  CUdeviceptr out = alloc(16);
  CUstream s = stream();
  ASSERT_EQ(k_sleep(k, s, 100000), CUDA_SUCCESS);
  ASSERT_EQ(fill_ex(k, s, reinterpret_cast<float*>(out), 4, 3.0f, true), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32(s, reinterpret_cast<CUdeviceptr>(&mark), 1, 0), CUDA_SUCCESS);
  EXPECT_FALSE(wait_until([] { return load(&mark) == 1u; }, std::chrono::milliseconds(50)));
  EXPECT_EQ(reinterpret_cast<float*>(out)[0], 0.0f);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(load(&mark), 1u);
  EXPECT_EQ(reinterpret_cast<float*>(out)[0], 3.0f);
  ASSERT_EQ(cuMemHostUnregister(&mark), CUDA_SUCCESS);
}

}  // namespace
}  // namespace sim_test
