// End-to-end cases for graphs built node by node, from C++ on the simulated driver (tests/e2e/test_graph_nodes.py).
// Each subcommand builds a graph of more than one kernel a different way, replays it, and the second replay (or the
// only one) asserts in indexSelectSmallIndex: the report must name that kernel, the replay line (REPLAY-SITE) and the
// line that made or last changed the node (the *-SITE marker of the mode). Each call sits in its own noinline
// function so the native frames name its line.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sim_program.h"

const e2e::Failure e2e::kFailure{3, false};

namespace {

CUstream g_s;
CUdeviceptr g_out, g_ids;

using e2e::check;
using e2e::fn;

void init() {
  e2e::init_primary();
  check(cuStreamCreate(&g_s, 0), "cuStreamCreate");
  check(cuMemAlloc(&g_out, 256), "cuMemAlloc");
  check(cuMemAlloc(&g_ids, 64), "cuMemAlloc");
  int64_t ids[4] = {1, 2, 3, 0};
  check(cuMemcpyHtoD(g_ids, ids, sizeof ids), "cuMemcpyHtoD");
  // A synchronous copy to the device may still run when it returns; the sync proves it did not fault (a 700 after
  // it would otherwise be the copy's as much as a kernel's: docs/attribution.md, device work that is no launch).
  check(cuCtxSynchronize(), "cuCtxSynchronize");
}

void make_ids_bad() {
  int64_t ids[4] = {1, 2, 1000, 0};
  check(cuMemcpyHtoD(g_ids, ids, sizeof ids), "cuMemcpyHtoD");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
}

// Kernel arguments, kept alive until the node is made (the driver copies them).
struct FillArgs {
  CUdeviceptr p = g_out;
  int32_t n = 4;
  float v = 1.0f;
  void* ptrs[3] = {&p, &n, &v};
};
struct IndexArgs {
  CUdeviceptr out = g_out, ids = g_ids;
  int32_t n = 4, size = 100;
  void* ptrs[4] = {&out, &ids, &n, &size};
};

template <class P>
P params(CUfunction f, void** args, unsigned grid = 1) {
  P p{};
  p.func = f;
  p.gridDimX = grid, p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  return p;
}

[[gnu::noinline]] CUgraphNode add_fill(CUgraph g, const CUgraphNode* dep) {
  FillArgs a;
  auto p = params<CUDA_KERNEL_NODE_PARAMS_v2>(fn("fill_f32"), a.ptrs);
  CUgraphNode n;
  check(cuGraphAddKernelNode_v2(&n, g, dep, dep ? 1 : 0, &p), "cuGraphAddKernelNode_v2");
  return n;
}

[[gnu::noinline]] CUgraphNode add_index(CUgraph g, const CUgraphNode* dep) {
  IndexArgs a;
  auto p = params<CUDA_KERNEL_NODE_PARAMS_v2>(fn("indexSelectSmallIndex"), a.ptrs, 2);
  CUgraphNode n;
  check(cuGraphAddKernelNode_v2(&n, g, dep, dep ? 1 : 0, &p), "cuGraphAddKernelNode_v2");  // ADD-SITE
  return n;
}

[[gnu::noinline]] CUgraphNode add_index_node(CUgraph g, const CUgraphNode* dep) {
  IndexArgs a;
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel = params<CUDA_KERNEL_NODE_PARAMS_v3>(fn("indexSelectSmallIndex"), a.ptrs, 2);
  CUgraphNode n;
  check(cuGraphAddNode_v2(&n, g, dep, nullptr, dep ? 1 : 0, &p), "cuGraphAddNode_v2");  // ADD-NODE-SITE
  return n;
}

[[gnu::noinline]] void set_index(CUgraphNode n) {
  IndexArgs a;
  auto p = params<CUDA_KERNEL_NODE_PARAMS_v2>(fn("indexSelectSmallIndex"), a.ptrs, 2);
  check(cuGraphKernelNodeSetParams_v2(n, &p), "cuGraphKernelNodeSetParams_v2");  // SET-SITE
}

[[gnu::noinline]] void exec_set_index(CUgraphExec x, CUgraphNode n) {
  IndexArgs a;
  auto p = params<CUDA_KERNEL_NODE_PARAMS_v2>(fn("indexSelectSmallIndex"), a.ptrs, 2);
  check(cuGraphExecKernelNodeSetParams_v2(x, n, &p), "cuGraphExecKernelNodeSetParams_v2");  // EXEC-SET-SITE
}

[[gnu::noinline]] void exec_set_fill(CUgraphExec x, CUgraphNode n) {
  FillArgs a;
  auto p = params<CUDA_KERNEL_NODE_PARAMS_v2>(fn("fill_f32"), a.ptrs);
  check(cuGraphExecKernelNodeSetParams_v2(x, n, &p), "cuGraphExecKernelNodeSetParams_v2");  // LATER-UPDATE-SITE
}

[[gnu::noinline]] void capture_index(CUstream s) {
  IndexArgs a;
  check(cuLaunchKernel(fn("indexSelectSmallIndex"), 2, 1, 1, 32, 1, 1, 0, s, a.ptrs, nullptr), "capture");  // CAPTURE-SITE
}

[[gnu::noinline]] void capture_fill(CUstream s) {
  FillArgs a;
  check(cuLaunchKernel(fn("fill_f32"), 1, 1, 1, 32, 1, 1, 0, s, a.ptrs, nullptr), "capture");
}

[[gnu::noinline]] void exec_update(CUgraphExec x, CUgraph g) {
  CUgraphExecUpdateResultInfo info{};
  check(cuGraphExecUpdate_v2(x, g, &info), "cuGraphExecUpdate_v2");  // UPDATE-SITE
}

[[gnu::noinline]] CUgraphNode add_child(CUgraph parent, CUgraph child, const CUgraphNode* dep) {
  CUgraphNode n;
  check(cuGraphAddChildGraphNode(&n, parent, dep, dep ? 1 : 0, child), "cuGraphAddChildGraphNode");  // CHILD-SITE
  return n;
}

[[gnu::noinline]] void replay(CUgraphExec x) {
  check(cuGraphLaunch(x, g_s), "cuGraphLaunch");  // REPLAY-SITE
}

CUgraphExec instantiate(CUgraph g) {
  CUgraphExec x;
  check(cuGraphInstantiateWithFlags(&x, g, 0), "cuGraphInstantiateWithFlags");
  return x;
}

// Replays once (good data), makes the data bad, replays again; the synchronize surfaces the assert.
int replay_twice(CUgraphExec x) {
  replay(x);
  check(cuStreamSynchronize(g_s), "first replay");
  printf("first replay ok\n");
  fflush(stdout);
  make_ids_bad();
  replay(x);
  CUresult r = cuStreamSynchronize(g_s);
  printf("second replay: %d\n", static_cast<int>(r));
  return r == CUDA_SUCCESS ? 0 : 3;
}

CUgraph new_graph() {
  CUgraph g;
  check(cuGraphCreate(&g, 0), "cuGraphCreate");
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  init();
  if (!strcmp(mode, "add")) {  // cuGraphAddKernelNode_v2 (cuDNN's way): fill, then indexSelect after it
    CUgraph g = new_graph();
    CUgraphNode a = add_fill(g, nullptr);
    add_index(g, &a);
    return replay_twice(instantiate(g));
  }
  if (!strcmp(mode, "add-node")) {  // cuGraphAddNode_v2 (XLA's way), with a memset node kept as one
    CUgraph g = new_graph();
    CUgraphNodeParams m{};
    m.type = CU_GRAPH_NODE_TYPE_MEMSET;
    m.memset.dst = g_out;
    m.memset.elementSize = 4;
    m.memset.width = 4;
    m.memset.height = 1;
    CUgraphNode ms;
    check(cuGraphAddNode_v2(&ms, g, nullptr, nullptr, 0, &m), "memset node");
    CUgraphNode a = add_fill(g, &ms);
    add_index_node(g, &a);
    return replay_twice(instantiate(g));
  }
  if (!strcmp(mode, "set-before")) {  // a fill node changed to indexSelect before instantiation (cuDNN)
    CUgraph g = new_graph();
    CUgraphNode a = add_fill(g, nullptr);
    CUgraphNode b = add_fill(g, &a);
    set_index(b);
    return replay_twice(instantiate(g));
  }
  if (!strcmp(mode, "exec-set")) {  // captured fills, the second changed in the exec (cuBLASLt's way)
    check(cuStreamBeginCapture_v2(g_s, CU_STREAM_CAPTURE_MODE_GLOBAL), "capture");
    capture_fill(g_s);
    capture_fill(g_s);
    CUgraph g;
    check(cuStreamEndCapture(g_s, &g), "cuStreamEndCapture");
    CUgraphExec x = instantiate(g);
    replay(x);
    check(cuStreamSynchronize(g_s), "first replay");
    printf("first replay ok\n");
    size_t count = 2;
    CUgraphNode nodes[2];
    check(cuGraphGetNodes(g, nodes, &count), "cuGraphGetNodes");
    make_ids_bad();
    exec_set_index(x, nodes[1]);
    replay(x);
    return cuStreamSynchronize(g_s) == CUDA_SUCCESS ? 0 : 3;
  }
  if (!strcmp(mode, "exec-update")) {  // an exec updated from a new capture (cuda.core's Graph.update)
    CUgraph a = new_graph();
    CUgraphNode n = add_fill(a, nullptr);
    add_fill(a, &n);
    CUgraphExec x = instantiate(a);
    replay(x);
    check(cuStreamSynchronize(g_s), "first replay");
    printf("first replay ok\n");
    check(cuStreamBeginCapture_v2(g_s, CU_STREAM_CAPTURE_MODE_GLOBAL), "capture");
    capture_fill(g_s);
    capture_index(g_s);
    CUgraph b;
    check(cuStreamEndCapture(g_s, &b), "cuStreamEndCapture");
    exec_update(x, b);
    make_ids_bad();
    replay(x);
    return cuStreamSynchronize(g_s) == CUDA_SUCCESS ? 0 : 3;
  }
  if (!strcmp(mode, "child")) {  // a child graph holding a captured kernel, after a fill node
    CUgraph child = new_graph();
    check(cuStreamBeginCaptureToGraph(g_s, child, nullptr, nullptr, 0, CU_STREAM_CAPTURE_MODE_GLOBAL), "capture");
    capture_index(g_s);
    CUgraph same;
    check(cuStreamEndCapture(g_s, &same), "cuStreamEndCapture");
    CUgraph parent = new_graph();
    CUgraphNode a = add_fill(parent, nullptr);
    add_child(parent, child, &a);
    check(cuGraphDestroy(child), "cuGraphDestroy");  // the node holds its own copy
    return replay_twice(instantiate(parent));
  }
  if (!strcmp(mode, "child-embedded")) {  // a node added to a child node's own graph after the node was made
    CUgraph child = new_graph();
    add_fill(child, nullptr);
    CUgraph parent = new_graph();
    CUgraphNode a = add_fill(parent, nullptr);
    CUgraphNode c = add_child(parent, child, &a);
    CUgraph inside;
    check(cuGraphChildGraphNodeGetGraph(c, &inside), "cuGraphChildGraphNodeGetGraph");  // not a copy: the node's own
    add_index(inside, nullptr);
    return replay_twice(instantiate(parent));
  }
  if (!strcmp(mode, "child-move")) {  // a child node that owns its graph (MOVE): a node added through the handle after
    CUgraph child = new_graph();
    add_fill(child, nullptr);
    CUgraph parent = new_graph();
    CUgraphNode a = add_fill(parent, nullptr);
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_GRAPH;
    p.graph.graph = child;
    p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;  // the parent owns the child graph itself, not a copy
    CUgraphNode c;
    check(cuGraphAddNode(&c, parent, &a, nullptr, 1, &p), "cuGraphAddNode (child, MOVE)");
    add_index(child, nullptr);  // the child's handle names the node's own graph now
    return replay_twice(instantiate(parent));
  }
  if (!strcmp(mode, "edges")) {  // nodes added without dependencies, ordered afterwards by edges (v2 and v1)
    CUgraph g = new_graph();
    CUgraphNode b = add_index(g, nullptr);
    CUgraphNode a = add_fill(g, nullptr);
    CUgraphNode c = add_fill(g, nullptr);
    check(cuGraphAddDependencies_v2(g, &a, &b, nullptr, 1), "cuGraphAddDependencies_v2");  // a before b
    check(cuGraphAddDependencies_v2(g, &c, &b, nullptr, 1), "cuGraphAddDependencies_v2");
    check(cuGraphRemoveDependencies_v2(g, &c, &b, nullptr, 1), "cuGraphRemoveDependencies_v2");
    return replay_twice(instantiate(g));
  }
  if (!strcmp(mode, "clone")) {  // the clone replayed, the original destroyed
    CUgraph g = new_graph();
    CUgraphNode a = add_fill(g, nullptr);
    add_index(g, &a);
    CUgraph copy;
    check(cuGraphClone(&copy, g), "cuGraphClone");
    check(cuGraphDestroy(g), "cuGraphDestroy");
    return replay_twice(instantiate(copy));
  }
  if (!strcmp(mode, "clone-cond")) {  // a kernel added to a clone's conditional body, reached by cuGraphNodeGetParams
    CUgraph g = new_graph();
    CUgraphNode a = add_fill(g, nullptr);
    CUcontext ctx;
    check(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    CUgraphConditionalHandle h;
    check(cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT), "cuGraphConditionalHandleCreate");
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h, p.conditional.type = CU_GRAPH_COND_TYPE_IF, p.conditional.size = 1;
    p.conditional.ctx = ctx;
    CUgraphNode c;
    check(cuGraphAddNode(&c, g, &a, nullptr, 1, &p), "cuGraphAddNode (conditional)");
    add_fill(p.conditional.phGraph_out[0], nullptr);  // the original's body: a fill
    CUgraph copy;
    check(cuGraphClone(&copy, g), "cuGraphClone");
    CUgraphNode cc;
    check(cuGraphNodeFindInClone(&cc, c, copy), "cuGraphNodeFindInClone");
    CUgraphNodeParams q{};
    check(cuGraphNodeGetParams(cc, &q), "cuGraphNodeGetParams");  // 13.2+: the clone's own body graphs
    add_index(q.conditional.phGraph_out[0], nullptr);  // into the clone's body only
    return replay_twice(instantiate(copy));
  }
  if (!strcmp(mode, "kern")) {  // a node made from a CUkernel in `kern`, func NULL (cuda.core's way)
    CUlibrary lib;
    check(cuLibraryLoadData(&lib, "image", nullptr, nullptr, 0, nullptr, nullptr, 0), "cuLibraryLoadData");
    CUkernel k;
    check(cuLibraryGetKernel(&k, lib, "indexSelectSmallIndex"), "cuLibraryGetKernel");
    CUgraph g = new_graph();
    CUgraphNode a = add_fill(g, nullptr);
    IndexArgs args;
    auto p = params<CUDA_KERNEL_NODE_PARAMS_v2>(nullptr, args.ptrs, 2);
    p.kern = k;
    CUgraphNode n;
    check(cuGraphAddKernelNode_v2(&n, g, &a, 1, &p), "cuGraphAddKernelNode_v2");  // KERN-SITE
    return replay_twice(instantiate(g));
  }
  if (!strcmp(mode, "before-update")) {
    // The replay runs illegal_address (700: no assert text to pick by); the exec is changed to fill_f32 right
    // after the launch, before the fault surfaces: the report must name the node the replay ran.
    CUgraph g = new_graph();
    CUfunction bad = fn("illegal_address");
    auto p = params<CUDA_KERNEL_NODE_PARAMS_v2>(bad, nullptr);
    CUgraphNode n;
    check(cuGraphAddKernelNode_v2(&n, g, nullptr, 0, &p), "cuGraphAddKernelNode_v2");  // BAD-NODE-SITE
    CUgraphExec x = instantiate(g);
    int64_t us = 300000;
    void* sleep_args[] = {&us};
    check(cuLaunchKernel(fn("sleep_us"), 1, 1, 1, 1, 1, 1, 0, g_s, sleep_args, nullptr), "sleep");
    replay(x);
    exec_set_fill(x, n);
    return cuStreamSynchronize(g_s) == CUDA_SUCCESS ? 0 : 3;
  }
  fprintf(stderr, "usage: %s add|add-node|set-before|exec-set|exec-update|child|child-embedded|edges|clone|"
          "kern|before-update|child-move\n", argv[0]);
  return 2;
}
