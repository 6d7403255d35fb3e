// A long run on the simulated driver (tests/e2e/test_long_run.py): THREADS threads launch from SITES distinct
// call sites each (all distinct over the threads: far more than the stack table holds), through a few thousand
// generated kernels, after a graph was captured and replayed at the very start; then a fault:
//   fresh  thread 1 launches an asserting kernel from one more, never seen site (the kernel's function was
//          got at the start), once every thread has launched all its sites;
//   graph  the early graph is replayed with its input gone bad (its capture-time stack is the one to name).
// The program prints its resident size before the threads start and once they all launched every site, before the
// fault and while they are still alive ("program: ... rss ..."), so the test can compare a run with cdsa to one
// without.
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sim_program.h"

// A failing call prints "program: WHAT failed: CODE" on stdout and exits 1.
const e2e::Failure e2e::kFailure{1, true};

namespace {

using e2e::check;
using e2e::fn;
using e2e::nll_args;
using e2e::NllArgs;

CUcontext g_ctx;

long rss_kib() {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
  fclose(f);
  return kib;
}

// 2^kDepth distinct stacks: at every level one of two call sites (their return addresses differ), chosen by a bit
// of `bits`. The launch itself is one line.
constexpr int kDepth = 18;
__attribute__((noinline)) CUresult site(int depth, uint32_t bits, CUfunction f, CUstream s, void** params) {
  CUresult r;
  if (depth == 0) {
    r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, params, nullptr);  // LAUNCH-SITE
    asm volatile("" ::: "memory");
    return r;
  }
  if (bits & 1) {
    r = site(depth - 1, bits >> 1, f, s, params);  // ONE-SITE
    asm volatile("nop" ::: "memory");
  } else {
    r = site(depth - 1, bits >> 1, f, s, params);  // ZERO-SITE
    asm volatile("nop; nop" ::: "memory");
  }
  return r;
}

// The graph captured at the start: one asserting-when-bad kernel, its input good for now.
__attribute__((noinline)) CUgraphExec capture_early_graph(CUstream s, NllArgs& a, CUfunction nll) {
  check(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
  check(cuLaunchKernel(nll, 1, 1, 1, 32, 1, 1, 0, s, a.get(), nullptr), "cuLaunchKernel (capture)");  // EARLY-CAPTURE
  CUgraph g;
  check(cuStreamEndCapture(s, &g), "cuStreamEndCapture");
  CUgraphExec exec;
  check(cuGraphInstantiateWithFlags(&exec, g, 0), "cuGraphInstantiateWithFlags");
  return exec;
}

__attribute__((noinline)) CUresult late_replay(CUgraphExec exec, CUstream s) {
  CUresult r = cuGraphLaunch(exec, s);  // LATE-REPLAY
  asm volatile("" ::: "memory");
  return r;
}

// One more site, never used by the threads' loops (bits above every loop's).
__attribute__((noinline)) void fresh_fault(CUfunction nll, NllArgs& a, CUstream s) {
  check(site(kDepth, (1u << kDepth) - 1, nll, s, a.get()), "cuLaunchKernel (fault)");  // FRESH-FAULT
  asm volatile("" ::: "memory");
}

constexpr int kKernels = 4096;  // generated kernels ("triton_..._fill_f32"), each launched from many sites
std::vector<CUfunction> g_kernels;
std::atomic<int> g_done{0};     // threads that launched all their sites
std::atomic<bool> g_go{false};  // the resident size is taken: thread 1 may fault, the threads may end
std::atomic<int> g_result{0};

void worker(int index, uint32_t sites, bool fault_here, CUfunction nll) {
  check(cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
  CUstream s;
  CUdeviceptr buf;
  check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(cuMemAlloc(&buf, 32 * sizeof(float)), "cuMemAlloc");
  NllArgs bad = fault_here ? nll_args(10) : NllArgs{};
  int32_t n = 32;
  float v = static_cast<float>(index);
  void* params[3] = {&buf, &n, &v};
  for (uint32_t i = 0; i < sites; ++i) {
    uint32_t bits = static_cast<uint32_t>(index) * sites + i;  // distinct over all threads
    check(site(kDepth, bits, g_kernels[bits % kKernels], s, params), "cuLaunchKernel");
    if (i % 4096 == 4095) check(cuStreamSynchronize(s), "cuStreamSynchronize");
  }
  check(cuStreamSynchronize(s), "cuStreamSynchronize");
  g_done.fetch_add(1);
  while (!g_go.load()) std::this_thread::yield();  // alive (with cdsa's per-thread blocks) while it is taken
  if (!fault_here) return;
  fresh_fault(nll, bad, s);
  g_result.store(static_cast<int>(cuStreamSynchronize(s)));
}

int case_long_run(int threads, uint32_t sites, const std::string& mode) {
  if (static_cast<uint64_t>(threads) * sites >= (1u << kDepth) - 1) {
    printf("program: at most %u sites in all\n", (1u << kDepth) - 2);
    return 2;
  }
  g_ctx = e2e::init_primary();
  CUfunction nll = fn("nll_loss_forward_reduce_cuda_kernel_2d");
  CUstream s0;
  check(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  NllArgs early = nll_args(5);
  CUgraphExec exec = capture_early_graph(s0, early, nll);
  check(cuGraphLaunch(exec, s0), "cuGraphLaunch (first)");
  check(cuStreamSynchronize(s0), "cuStreamSynchronize (first)");
  for (int k = 0; k < kKernels; ++k) g_kernels.push_back(fn(("triton_poi_fused_" + std::to_string(k) + "_fill_f32").c_str()));
  printf("program: early graph replayed\n");
  long before = rss_kib();

  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t, sites, mode == "fresh" && t == 1, nll);
  while (g_done.load() < threads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  long after = rss_kib();  // every site launched, no fault yet, every thread still alive
  g_go.store(true);
  for (auto& t : pool) t.join();
  printf("program: %d threads x %u sites, rss %ld kB before the threads, %ld kB after\n", threads, sites, before,
         after);
  fflush(stdout);
  if (mode == "fresh") return g_result.load() == CUDA_ERROR_ASSERT ? 3 : 0;

  int64_t bad[4] = {3, 7, 10, 1};
  check(cuMemcpyHtoD(early.target, bad, sizeof bad), "cuMemcpyHtoD");
  check(late_replay(exec, s0), "cuGraphLaunch (late)");
  CUresult r = cuStreamSynchronize(s0);
  printf("program: late replay synchronize returned %d\n", static_cast<int>(r));
  return r == CUDA_ERROR_ASSERT ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "long-run" && (std::string(argv[4]) == "fresh" || std::string(argv[4]) == "graph"))
    return case_long_run(atoi(argv[2]), static_cast<uint32_t>(atol(argv[3])), argv[4]);
  fprintf(stderr, "usage: %s long-run THREADS SITES_PER_THREAD fresh|graph\n", argv[0]);
  return 2;
}
