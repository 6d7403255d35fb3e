// Unit test of the simulated CUDA driver: stream capture and replay (sim_graphs.cc; graphs built node by node are
// sim_graphs_test's).
// Part of sim_test; the shared helpers are in sim_test_support.h.

#include "sim_test_support.h"

namespace sim_test {
namespace {

// ======================================================================
// In-process tests (nothing here faults)
// ======================================================================

TEST_F(SimTest, GraphCaptureAndReplay) {
  CUstream s = stream(), s2 = stream();
  CUdeviceptr buf = alloc(4 * sizeof(float)), flag = alloc(8);
  auto* fb = reinterpret_cast<float*>(buf);
  float host_out[4] = {};

  EXPECT_EQ(cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);

  float v = 3.0f;
  int32_t n = 4;
  void* args[] = {&buf, &n, &v};
  ASSERT_EQ(k_sleep(k, s, 10000), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(k.fill, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr), CUDA_SUCCESS);
  v = 9.0f;  // arguments were copied at capture time
  n = 1;
  ASSERT_EQ(cuStreamWriteValue64(s, flag, 77, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync(host_out, buf, sizeof host_out, s), CUDA_SUCCESS);

  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  float tmp[4];
  EXPECT_EQ(cuMemcpyDtoH(tmp, buf, sizeof tmp), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);  // other streams are fine

  // Global mode: must end on the capturing thread.
  std::thread([&] {
    CUgraph g = nullptr;
    EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  }).join();

  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 0u);  // nothing ran
  EXPECT_EQ(fb[0], 0.0f);

  CUgraph graph = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
  ASSERT_NE(graph, nullptr);
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuStreamEndCapture(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 0u);

  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiate(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(fb[i], 3.0f);
  for (float f : host_out) EXPECT_EQ(f, 3.0f);
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 77u);

  // Replays run again, in order, on any stream.
  __atomic_store_n(reinterpret_cast<uint64_t*>(flag), 0, __ATOMIC_RELEASE);
  ASSERT_EQ(cuMemcpyHtoD(buf, host_out, 0), CUDA_SUCCESS);
  const float zeros[4] = {};
  ASSERT_EQ(cuMemcpyHtoD(buf, zeros, sizeof zeros), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s2), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s2), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(s2), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(fb[i], 3.0f);
  EXPECT_EQ(load(reinterpret_cast<uint64_t*>(flag)), 77u);

  // Relaxed capture may end on another thread; a graph may be captured into another capture.
  ASSERT_EQ(cuStreamBeginCapture(s2, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s2), CUDA_SUCCESS);
  CUgraph g2 = nullptr;
  std::thread([&] { EXPECT_EQ(cuStreamEndCapture(s2, &g2), CUDA_SUCCESS); }).join();
  ASSERT_NE(g2, nullptr);
  CUgraphExec exec2 = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec2, g2, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoD(buf, zeros, sizeof zeros), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec2, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(fb[1], 3.0f);

  destroy_graphs({exec, exec2}, {graph, g2});
  EXPECT_EQ(cuGraphLaunch(exec, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_INVALID_HANDLE);
}

// cuStreamBeginCaptureToGraph: capture appends to an existing graph; such a
// graph (like a conditional node's body) rejects memory-operation nodes.
TEST_F(SimTest, CaptureToGraph) {
  CUstream s = stream();
  CUdeviceptr buf = alloc(4 * sizeof(float)), flag = alloc(8);
  auto* fb = reinterpret_cast<float*>(buf);

  CUgraph graph = nullptr;
  ASSERT_EQ(cuGraphCreate(&graph, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, nullptr, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_VALUE);
  CUgraphNode dep = nullptr;
  EXPECT_EQ(cuStreamBeginCaptureToGraph(s, graph, &dep, nullptr, 1, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBeginCaptureToGraph(nullptr, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(cuStreamBeginCaptureToGraph(s, graph, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  ASSERT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_ILLEGAL_STATE);  // still being captured into
  ASSERT_EQ(k_fill(k, s, fb, 4, 2.5f), CUDA_SUCCESS);
  CUgraph out = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &out), CUDA_SUCCESS);
  EXPECT_EQ(out, graph);  // the same graph, now holding the captured work
  EXPECT_EQ(fb[0], 0.0f);

  CUgraphExec exec = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(fb[i], 2.5f);

  // A stream write captured into it: instantiation fails; without it, fine.
  CUgraph with_memop = nullptr;
  ASSERT_EQ(cuGraphCreate(&with_memop, 0), CUDA_SUCCESS);
  using CaptureToGraph =
      CUresult (*)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t, CUstreamCaptureMode);
  auto to_graph_ptsz = reinterpret_cast<CaptureToGraph>(sym("cuStreamBeginCaptureToGraph_ptsz"));
  ASSERT_EQ(to_graph_ptsz(s, with_memop, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32(s, flag, 1, 0), CUDA_SUCCESS);
  ASSERT_EQ(k_fill(k, s, fb, 4, 1.0f), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamEndCapture(s, &out), CUDA_SUCCESS);
  CUgraphExec bad = nullptr;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&bad, with_memop, 0), CUDA_ERROR_NOT_SUPPORTED);
  using Instantiate5 = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
  EXPECT_EQ(reinterpret_cast<Instantiate5>(sym("cuGraphInstantiate_v2"))(&bad, with_memop, nullptr, nullptr, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  // The same work captured the ordinary way instantiates.
  ASSERT_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWriteValue32(s, flag, 1, 0), CUDA_SUCCESS);
  CUgraph ordinary = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &ordinary), CUDA_SUCCESS);
  CUgraphExec good = nullptr;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&good, ordinary, 0), CUDA_SUCCESS);

  destroy_graphs({exec, good}, {graph, with_memop, ordinary});
}

// ======================================================================
// Child-process tests
// ======================================================================

SIM_CHILD_TEST(GraphReplayFaults) {
  Fd2Capture cap;
  Kernels k;
  CHILD_EQ(setup(k), CUDA_SUCCESS);
  const int64_t index[2] = {0, 1};
  CUdeviceptr out = child_alloc(16), idx = child_copy_to_device(index);
  CUstream s = child_stream();
  CHILD_EQ(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  CHILD_EQ(k_index(k, s, reinterpret_cast<float*>(out), reinterpret_cast<int64_t*>(idx), 2, 2), CUDA_SUCCESS);
  CUgraph g;
  CHILD_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  CUgraphExec x;
  CHILD_EQ(cuGraphInstantiate(&x, g, 0), CUDA_SUCCESS);
  CHILD_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);
  CHILD_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);  // valid indices
  const int64_t bad[2] = {0, 2};
  CHILD_EQ(cuMemcpyHtoD(idx, bad, sizeof bad), CUDA_SUCCESS);
  CHILD_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);  // now index 1 is out of range
  CHILD_EQ(cuStreamSynchronize(s), CUDA_ERROR_ASSERT);
  CHILD_STDERR(cap, index_line(1));
  CHILD_EQ(cuGraphLaunch(x, s), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuGraphExecDestroy(x), CUDA_ERROR_ASSERT);
  CHILD_EQ(cuGraphDestroy(g), CUDA_ERROR_ASSERT);
  child_exit_ok();
}

}  // namespace
}  // namespace sim_test
