// Unit test of the simulated driver's graphs built node by node (tests/sim/sim_graphs.cc): kernel nodes from
// CUfunction and CUkernel, cuGraphAddNode's node kinds, parameters changed in the graph and in the exec (later
// launches only), cuGraphExecUpdate, child graphs, clones, enabled state, conditional bodies, dependency order.
// One process, no fault (the faulting replays are the e2e tests' part).

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

// The first versions of three entry points, which cuda.h's macros hide behind their newest names.
extern "C" CUresult CUDAAPI add_kernel_node_v1(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                               const CUDA_KERNEL_NODE_PARAMS_v1*) __asm__("cuGraphAddKernelNode");
extern "C" CUresult CUDAAPI add_node_v1(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                        CUgraphNodeParams*) __asm__("cuGraphAddNode");
extern "C" CUresult CUDAAPI exec_update_v1(CUgraphExec, CUgraph, CUgraphNode*,
                                           CUgraphExecUpdateResult*) __asm__("cuGraphExecUpdate");
extern "C" CUresult CUDAAPI add_deps_v1(CUgraph, const CUgraphNode*, const CUgraphNode*,
                                        size_t) __asm__("cuGraphAddDependencies");
extern "C" CUresult CUDAAPI remove_deps_v1(CUgraph, const CUgraphNode*, const CUgraphNode*,
                                           size_t) __asm__("cuGraphRemoveDependencies");

namespace {

struct GraphSim : ::testing::Test {
  CUmodule mod = nullptr;
  CUfunction fill = nullptr, sleep = nullptr;
  CUstream s = nullptr;
  float* buf = nullptr;  // device memory = host memory in the sim

  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    static const char image[] = "any image";
    ASSERT_EQ(cuModuleLoadData(&mod, image), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&fill, mod, "fill_f32"), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&sleep, mod, "sleep_us"), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    CUdeviceptr d = 0;
    ASSERT_EQ(cuMemAlloc(&d, 64 * sizeof(float)), CUDA_SUCCESS);
    buf = reinterpret_cast<float*>(static_cast<uintptr_t>(d));
  }
  void TearDown() override {
    cuMemFree(reinterpret_cast<CUdeviceptr>(buf));
    cuStreamDestroy(s);
    cuModuleUnload(mod);
  }

  // fill_f32(buf + at, 1, v): arguments held by the caller until the node is made (the driver copies them).
  struct FillArgs {
    CUdeviceptr p;
    int32_t n = 1;
    float v;
    void* ptrs[3];
    FillArgs(float* base, int at, float value) : p(reinterpret_cast<CUdeviceptr>(base + at)), v(value) {
      ptrs[0] = &p, ptrs[1] = &n, ptrs[2] = &v;
    }
  };
  template <class P>
  static P kernel_params(CUfunction f, FillArgs& a) {
    P p{};
    p.func = f;
    p.gridDimX = p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = a.ptrs;
    return p;
  }
  CUgraphNode add_fill(CUgraph g, int at, float v, std::vector<CUgraphNode> deps = {}) {
    FillArgs a(buf, at, v);
    CUDA_KERNEL_NODE_PARAMS_v2 p = kernel_params<CUDA_KERNEL_NODE_PARAMS_v2>(fill, a);
    CUgraphNode n = nullptr;
    EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, deps.data(), deps.size(), &p), CUDA_SUCCESS);
    return n;
  }
  void run(CUgraphExec x) {
    ASSERT_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  }
};

TEST_F(GraphSim, KernelNodesRunInDependencyOrder) {
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNode a = add_fill(g, 0, 1.0f);
  CUgraphNode b = add_fill(g, 0, 2.0f, {a});  // after a: its value stays
  add_fill(g, 1, 3.0f, {b});
  size_t n = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 3u);
  CUgraphNodeType t;
  ASSERT_EQ(cuGraphNodeGetType(a, &t), CUDA_SUCCESS);
  EXPECT_EQ(t, CU_GRAPH_NODE_TYPE_KERNEL);
  CUDA_KERNEL_NODE_PARAMS_v2 got{};
  ASSERT_EQ(cuGraphKernelNodeGetParams_v2(b, &got), CUDA_SUCCESS);
  EXPECT_EQ(got.func, fill);
  EXPECT_EQ(got.blockDimX, 32u);
  EXPECT_EQ(*static_cast<float*>(got.kernelParams[2]), 2.0f);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 2.0f);
  EXPECT_EQ(buf[1], 3.0f);
  // A dependency from another graph, or no parameters, is refused.
  CUgraph other = nullptr;
  ASSERT_EQ(cuGraphCreate(&other, 0), CUDA_SUCCESS);
  CUgraphNode bad = nullptr;
  EXPECT_EQ(cuGraphAddEmptyNode(&bad, other, &a, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphAddKernelNode_v2(&bad, g, nullptr, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(other), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphNodeGetType(a, &t), CUDA_ERROR_INVALID_VALUE);  // its graph is gone
}

TEST_F(GraphSim, EdgesAddedAndRemovedOrderTheRun) {
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNode a = add_fill(g, 0, 1.0f);
  CUgraphNode b = add_fill(g, 0, 2.0f);
  // b before a, by an edge added later (v2, with edge data): a's value stays.
  CUgraphEdgeData e{};
  ASSERT_EQ(cuGraphAddDependencies_v2(g, &b, &a, &e, 1), CUDA_SUCCESS);
  EXPECT_EQ(add_deps_v1(g, &b, &a, 1), CUDA_ERROR_INVALID_VALUE);  // it exists
  EXPECT_EQ(add_deps_v1(g, &a, &b, 1), CUDA_ERROR_INVALID_VALUE);  // a cycle
  EXPECT_EQ(add_deps_v1(g, &a, &a, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(add_deps_v1(g, nullptr, nullptr, 0), CUDA_SUCCESS);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 1.0f);
  // Removed, and the other way round (v1): b's value stays in a new exec; the old one keeps its order.
  EXPECT_EQ(remove_deps_v1(g, &a, &b, 1), CUDA_ERROR_INVALID_VALUE);  // no such edge
  ASSERT_EQ(cuGraphRemoveDependencies_v2(g, &b, &a, nullptr, 1), CUDA_SUCCESS);
  ASSERT_EQ(add_deps_v1(g, &a, &b, 1), CUDA_SUCCESS);
  CUgraphExec y = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&y, g, 0), CUDA_SUCCESS);
  run(y);
  EXPECT_EQ(buf[0], 2.0f);
  run(x);
  EXPECT_EQ(buf[0], 1.0f);
  CUgraph other = nullptr;
  ASSERT_EQ(cuGraphCreate(&other, 0), CUDA_SUCCESS);
  CUgraphNode c = add_fill(other, 1, 1.0f);
  EXPECT_EQ(add_deps_v1(g, &a, &c, 1), CUDA_ERROR_INVALID_VALUE);  // not a node of g
  EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecDestroy(y), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(other), CUDA_SUCCESS);
}

TEST_F(GraphSim, ChildNodesOwnGraphTakesNewNodes) {
  CUgraph child = nullptr, parent = nullptr;
  ASSERT_EQ(cuGraphCreate(&child, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphCreate(&parent, 0), CUDA_SUCCESS);
  add_fill(child, 0, 1.0f);
  CUgraphNode cn = nullptr;
  ASSERT_EQ(cuGraphAddChildGraphNode(&cn, parent, nullptr, 0, child), CUDA_SUCCESS);
  CUgraph inside = nullptr;
  ASSERT_EQ(cuGraphChildGraphNodeGetGraph(cn, &inside), CUDA_SUCCESS);
  add_fill(inside, 1, 5.0f);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, parent, 0), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 1.0f);
  EXPECT_EQ(buf[1], 5.0f);  // the node added to the child node's own graph ran
  EXPECT_EQ(cuGraphExecDestroy(x), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(parent), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(child), CUDA_SUCCESS);
}

TEST_F(GraphSim, KernNodeAndTheV1Layout) {
  CUlibrary lib = nullptr;
  static const char image[] = "any image";
  ASSERT_EQ(cuLibraryLoadData(&lib, image, nullptr, nullptr, 0, nullptr, nullptr, 0), CUDA_SUCCESS);
  CUkernel k = nullptr;
  ASSERT_EQ(cuLibraryGetKernel(&k, lib, "fill_f32"), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  FillArgs a(buf, 2, 4.0f);
  CUDA_KERNEL_NODE_PARAMS_v2 p = kernel_params<CUDA_KERNEL_NODE_PARAMS_v2>(nullptr, a);
  p.kern = k;  // func NULL: `kern` is the kernel (cuda.core's way)
  CUgraphNode n = nullptr;
  ASSERT_EQ(cuGraphAddKernelNode_v2(&n, g, nullptr, 0, &p), CUDA_SUCCESS);
  CUDA_KERNEL_NODE_PARAMS_v2 got{};
  ASSERT_EQ(cuGraphKernelNodeGetParams_v2(n, &got), CUDA_SUCCESS);
  EXPECT_EQ(got.func, nullptr);
  EXPECT_EQ(got.kern, k);
  FillArgs b(buf, 3, 5.0f);
  CUDA_KERNEL_NODE_PARAMS_v1 p1 = kernel_params<CUDA_KERNEL_NODE_PARAMS_v1>(fill, b);
  CUgraphNode n1 = nullptr;
  ASSERT_EQ(add_kernel_node_v1(&n1, g, nullptr, 0, &p1), CUDA_SUCCESS);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[2], 4.0f);
  EXPECT_EQ(buf[3], 5.0f);
  cuGraphExecDestroy(x);
  cuGraphDestroy(g);
  cuLibraryUnload(lib);
}

TEST_F(GraphSim, AddNodeKeepsEachKind) {
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNodeParams m{};
  m.type = CU_GRAPH_NODE_TYPE_MEMSET;
  m.memset.dst = reinterpret_cast<CUdeviceptr>(buf + 4);
  m.memset.value = 0x3f800000;  // 1.0f
  m.memset.elementSize = 4;
  m.memset.width = 2;
  m.memset.height = 1;
  CUgraphNode ms = nullptr;
  ASSERT_EQ(cuGraphAddNode_v2(&ms, g, nullptr, nullptr, 0, &m), CUDA_SUCCESS);
  FillArgs a(buf, 5, 6.0f);
  CUgraphNodeParams k{};
  k.type = CU_GRAPH_NODE_TYPE_KERNEL;
  k.kernel = kernel_params<CUDA_KERNEL_NODE_PARAMS_v3>(fill, a);
  CUgraphNode kn = nullptr;
  ASSERT_EQ(cuGraphAddNode_v2(&kn, g, &ms, nullptr, 1, &k), CUDA_SUCCESS);  // after the memset
  static int host_calls = 0;
  CUgraphNodeParams h{};
  h.type = CU_GRAPH_NODE_TYPE_HOST;
  h.host.fn = [](void* p) { ++*static_cast<int*>(p); };
  h.host.userData = &host_calls;
  CUgraphNode hn = nullptr, en = nullptr;
  ASSERT_EQ(add_node_v1(&hn, g, &kn, 1, &h), CUDA_SUCCESS);
  CUgraphNodeParams e{};
  e.type = CU_GRAPH_NODE_TYPE_EMPTY;
  ASSERT_EQ(add_node_v1(&en, g, &hn, 1, &e), CUDA_SUCCESS);
  float src[2] = {8.0f, 9.0f};
  CUgraphNodeParams c{};
  c.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  c.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.memcpy.copyParams.srcHost = src;
  c.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.memcpy.copyParams.dstDevice = reinterpret_cast<CUdeviceptr>(buf + 6);
  c.memcpy.copyParams.WidthInBytes = sizeof src;
  c.memcpy.copyParams.Height = c.memcpy.copyParams.Depth = 1;
  CUgraphNode cn = nullptr;
  ASSERT_EQ(add_node_v1(&cn, g, &en, 1, &c), CUDA_SUCCESS);
  CUgraphNodeType t;
  const std::pair<CUgraphNode, CUgraphNodeType> kinds[] = {{ms, CU_GRAPH_NODE_TYPE_MEMSET},
                                                           {kn, CU_GRAPH_NODE_TYPE_KERNEL},
                                                           {hn, CU_GRAPH_NODE_TYPE_HOST},
                                                           {en, CU_GRAPH_NODE_TYPE_EMPTY},
                                                           {cn, CU_GRAPH_NODE_TYPE_MEMCPY}};
  for (auto [node, kind] : kinds) {
    ASSERT_EQ(cuGraphNodeGetType(node, &t), CUDA_SUCCESS);
    EXPECT_EQ(t, kind);
  }
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[4], 1.0f);
  EXPECT_EQ(buf[5], 6.0f);
  EXPECT_EQ(host_calls, 1);
  EXPECT_EQ(buf[6], 8.0f);
  EXPECT_EQ(buf[7], 9.0f);
  // cuGraphNodeSetParams changes the node for later instantiations; its kind cannot change.
  FillArgs b(buf, 5, 7.0f);
  k.kernel = kernel_params<CUDA_KERNEL_NODE_PARAMS_v3>(fill, b);
  ASSERT_EQ(cuGraphNodeSetParams(kn, &k), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphNodeSetParams(ms, &k), CUDA_ERROR_INVALID_VALUE);
  run(x);
  EXPECT_EQ(buf[5], 6.0f);  // the exec still holds what it was instantiated with
  CUgraphExec x2 = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x2, g, 0), CUDA_SUCCESS);
  run(x2);
  EXPECT_EQ(buf[5], 7.0f);
  cuGraphExecDestroy(x);
  cuGraphExecDestroy(x2);
  cuGraphDestroy(g);
}

TEST_F(GraphSim, ExecChangesApplyToLaterLaunchesOnly) {
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  int64_t us = 20000;
  void* sleep_args[] = {&us};
  CUDA_KERNEL_NODE_PARAMS_v2 sp{};
  sp.func = sleep;
  sp.gridDimX = sp.gridDimY = sp.gridDimZ = sp.blockDimX = sp.blockDimY = sp.blockDimZ = 1;
  sp.kernelParams = sleep_args;
  CUgraphNode slow = nullptr;
  ASSERT_EQ(cuGraphAddKernelNode_v2(&slow, g, nullptr, 0, &sp), CUDA_SUCCESS);
  CUgraphNode f = add_fill(g, 0, 1.0f, {slow});
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(x, s), CUDA_SUCCESS);  // still sleeping when the node changes
  FillArgs a(buf, 0, 5.0f);
  CUDA_KERNEL_NODE_PARAMS_v2 p = kernel_params<CUDA_KERNEL_NODE_PARAMS_v2>(fill, a);
  ASSERT_EQ(cuGraphExecKernelNodeSetParams_v2(x, f, &p), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(buf[0], 1.0f);  // the launch before the change ran the old node
  run(x);
  EXPECT_EQ(buf[0], 5.0f);
  // cuGraphExecNodeSetParams too; the graph's own node is unchanged.
  FillArgs b(buf, 0, 6.0f);
  CUgraphNodeParams np{};
  np.type = CU_GRAPH_NODE_TYPE_KERNEL;
  np.kernel = kernel_params<CUDA_KERNEL_NODE_PARAMS_v3>(fill, b);
  ASSERT_EQ(cuGraphExecNodeSetParams(x, f, &np), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 6.0f);
  CUDA_KERNEL_NODE_PARAMS_v2 got{};
  ASSERT_EQ(cuGraphKernelNodeGetParams_v2(f, &got), CUDA_SUCCESS);
  EXPECT_EQ(*static_cast<float*>(got.kernelParams[2]), 1.0f);
  // Disabled, it does not run; enabled again, it does.
  buf[0] = 0.0f;
  ASSERT_EQ(cuGraphNodeSetEnabled(x, f, 0), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 0.0f);
  ASSERT_EQ(cuGraphNodeSetEnabled(x, f, 1), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 6.0f);
  cuGraphExecDestroy(x);
  cuGraphDestroy(g);
}

TEST_F(GraphSim, ExecUpdateFromACapturedGraph) {
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  add_fill(g, 0, 1.0f);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  FillArgs a(buf, 0, 7.0f);
  ASSERT_EQ(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, s, a.ptrs, nullptr), CUDA_SUCCESS);
  CUgraph captured = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &captured), CUDA_SUCCESS);
  CUgraphExecUpdateResultInfo info{};
  ASSERT_EQ(cuGraphExecUpdate_v2(x, captured, &info), CUDA_SUCCESS);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 7.0f);
  // Another topology is refused, with the reason.
  CUgraph two = nullptr;
  ASSERT_EQ(cuGraphCreate(&two, 0), CUDA_SUCCESS);
  add_fill(two, 0, 1.0f);
  add_fill(two, 1, 1.0f);
  EXPECT_EQ(cuGraphExecUpdate_v2(x, two, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  CUgraphExecUpdateResult old_result;
  CUgraphNode err = nullptr;
  EXPECT_EQ(exec_update_v1(x, two, &err, &old_result), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(old_result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  // The captured graph's node also names the exec's node now (the sim pairs nodes in dependency order).
  CUgraphNode cap_node = nullptr;
  size_t n = 1;
  ASSERT_EQ(cuGraphGetNodes(captured, &cap_node, &n), CUDA_SUCCESS);
  FillArgs b(buf, 0, 8.0f);
  CUDA_KERNEL_NODE_PARAMS_v2 p = kernel_params<CUDA_KERNEL_NODE_PARAMS_v2>(fill, b);
  ASSERT_EQ(cuGraphExecKernelNodeSetParams_v2(x, cap_node, &p), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 8.0f);
  cuGraphExecDestroy(x);
  for (CUgraph h : {g, captured, two}) cuGraphDestroy(h);
}

TEST_F(GraphSim, ChildGraphsAndClones) {
  CUgraph child = nullptr, parent = nullptr;
  ASSERT_EQ(cuGraphCreate(&child, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphCreate(&parent, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCaptureToGraph(s, child, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  FillArgs a(buf, 0, 2.0f);
  ASSERT_EQ(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, s, a.ptrs, nullptr), CUDA_SUCCESS);
  CUgraph same = nullptr;
  ASSERT_EQ(cuStreamEndCapture(s, &same), CUDA_SUCCESS);
  CUgraphNode cn = nullptr;
  ASSERT_EQ(cuGraphAddChildGraphNode(&cn, parent, nullptr, 0, child), CUDA_SUCCESS);
  add_fill(child, 1, 9.0f);  // the node holds a copy: a later change of the child is not in it
  CUgraph inside = nullptr;
  ASSERT_EQ(cuGraphChildGraphNodeGetGraph(cn, &inside), CUDA_SUCCESS);
  size_t n = 0;
  ASSERT_EQ(cuGraphGetNodes(inside, nullptr, &n), CUDA_SUCCESS);
  EXPECT_EQ(n, 1u);
  CUgraphExec x = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&x, parent, 0), CUDA_SUCCESS);
  run(x);
  EXPECT_EQ(buf[0], 2.0f);
  EXPECT_EQ(buf[1], 0.0f);
  // The exec's child replaced by another graph of the same shape.
  CUgraph other = nullptr;
  ASSERT_EQ(cuGraphCreate(&other, 0), CUDA_SUCCESS);
  add_fill(other, 0, 3.0f);
  ASSERT_EQ(cuGraphExecChildGraphNodeSetParams(x, cn, other), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecChildGraphNodeSetParams(x, cn, child), CUDA_ERROR_INVALID_VALUE);  // two nodes now
  run(x);
  EXPECT_EQ(buf[0], 3.0f);
  // A clone: its own nodes, found from the original's.
  CUgraph copy = nullptr;
  ASSERT_EQ(cuGraphClone(&copy, parent), CUDA_SUCCESS);
  CUgraphNode found = nullptr;
  ASSERT_EQ(cuGraphNodeFindInClone(&found, cn, copy), CUDA_SUCCESS);
  EXPECT_NE(found, cn);
  CUgraphNodeType t;
  ASSERT_EQ(cuGraphNodeGetType(found, &t), CUDA_SUCCESS);
  EXPECT_EQ(t, CU_GRAPH_NODE_TYPE_GRAPH);
  CUgraphExec y = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&y, copy, 0), CUDA_SUCCESS);
  buf[0] = 0.0f;
  run(y);
  EXPECT_EQ(buf[0], 2.0f);
  cuGraphExecDestroy(x);
  cuGraphExecDestroy(y);
  for (CUgraph h : {child, parent, other, copy}) cuGraphDestroy(h);
}

TEST_F(GraphSim, ConditionalBodyRunsByTheHandlesDefault) {
  for (unsigned value : {0u, 1u}) {
    CUgraph g = nullptr;
    ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
    CUgraphConditionalHandle h = 0;
    CUcontext ctx = nullptr;
    ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
    ASSERT_EQ(cuGraphConditionalHandleCreate(&h, g, ctx, value, CU_GRAPH_COND_ASSIGN_DEFAULT), CUDA_SUCCESS);
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h;
    p.conditional.type = CU_GRAPH_COND_TYPE_IF;
    p.conditional.size = 1;
    p.conditional.ctx = ctx;
    CUgraphNode n = nullptr;
    ASSERT_EQ(add_node_v1(&n, g, nullptr, 0, &p), CUDA_SUCCESS);
    ASSERT_NE(p.conditional.phGraph_out, nullptr);
    CUgraph body = p.conditional.phGraph_out[0];
    add_fill(body, 0, 4.0f);  // a body is filled node by node (or by capture into it)
    CUgraphExec x = nullptr;
    ASSERT_EQ(cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    buf[0] = 0.0f;
    run(x);
    EXPECT_EQ(buf[0], value ? 4.0f : 0.0f);
    EXPECT_EQ(cuGraphDestroy(body), CUDA_ERROR_INVALID_HANDLE);  // the node owns it
    cuGraphExecDestroy(x);
    cuGraphDestroy(g);
  }
}

// cuGraphNodeGetParams: a conditional node's bodies (a clone's node: the clone's own copies, which run in the
// clone's replays and not in the original's), a kernel node's launch, a child node's graph.
TEST_F(GraphSim, NodeGetParamsNamesEachNodesOwnBodies) {
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphConditionalHandle h = 0;
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT), CUDA_SUCCESS);
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h, p.conditional.type = CU_GRAPH_COND_TYPE_IF, p.conditional.size = 1;
  p.conditional.ctx = ctx;
  CUgraphNode n = nullptr;
  ASSERT_EQ(add_node_v1(&n, g, nullptr, 0, &p), CUDA_SUCCESS);
  CUgraphNodeParams got{};
  ASSERT_EQ(cuGraphNodeGetParams(n, &got), CUDA_SUCCESS);
  EXPECT_EQ(got.type, CU_GRAPH_NODE_TYPE_CONDITIONAL);
  EXPECT_EQ(got.conditional.handle, h);
  EXPECT_EQ(got.conditional.type, CU_GRAPH_COND_TYPE_IF);
  ASSERT_EQ(got.conditional.size, 1u);
  EXPECT_EQ(got.conditional.phGraph_out[0], p.conditional.phGraph_out[0]);
  CUgraphNode k = add_fill(p.conditional.phGraph_out[0], 0, 4.0f);
  CUgraph copy = nullptr;
  ASSERT_EQ(cuGraphClone(&copy, g), CUDA_SUCCESS);
  CUgraphNode cn = nullptr;
  ASSERT_EQ(cuGraphNodeFindInClone(&cn, n, copy), CUDA_SUCCESS);
  CUgraphNodeParams cg{};
  ASSERT_EQ(cuGraphNodeGetParams(cn, &cg), CUDA_SUCCESS);
  ASSERT_EQ(cg.conditional.size, 1u);
  CUgraph clone_body = cg.conditional.phGraph_out[0];
  ASSERT_NE(clone_body, p.conditional.phGraph_out[0]);
  add_fill(clone_body, 0, 7.0f);  // after the body's fill: runs in the clone's replays only
  CUgraphExec xo = nullptr, xc = nullptr;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&xo, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphInstantiateWithFlags(&xc, copy, 0), CUDA_SUCCESS);
  buf[0] = 0.0f;
  run(xo);
  EXPECT_EQ(buf[0], 4.0f);
  run(xc);
  EXPECT_EQ(buf[0], 7.0f);
  CUgraphNodeParams kp{};
  ASSERT_EQ(cuGraphNodeGetParams(k, &kp), CUDA_SUCCESS);
  EXPECT_EQ(kp.type, CU_GRAPH_NODE_TYPE_KERNEL);
  EXPECT_EQ(kp.kernel.func, fill);
  EXPECT_EQ(cuGraphNodeGetParams(nullptr, &kp), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphNodeGetParams(k, nullptr), CUDA_ERROR_INVALID_VALUE);
  cuGraphExecDestroy(xo);
  cuGraphExecDestroy(xc);
  cuGraphDestroy(copy);
  cuGraphDestroy(g);
}

TEST_F(GraphSim, DeviceUpdatableAttributeIsKept) {
  CUgraph g = nullptr;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNode n = add_fill(g, 0, 1.0f);
  CUkernelNodeAttrValue v{};
  v.deviceUpdatableKernelNode.deviceUpdatable = 1;
  EXPECT_EQ(cuGraphKernelNodeSetAttribute(n, CU_KERNEL_NODE_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &v), CUDA_SUCCESS);
  v.deviceUpdatableKernelNode.deviceUpdatable = 2;
  EXPECT_EQ(cuGraphKernelNodeSetAttribute(n, CU_KERNEL_NODE_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &v),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuGraphDestroyNode(n), CUDA_SUCCESS);
  size_t count = 5;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &count), CUDA_SUCCESS);
  EXPECT_EQ(count, 0u);
  cuGraphDestroy(g);
}

}  // namespace
