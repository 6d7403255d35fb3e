// Graph bookkeeping (shim/record/graph_capture.h) against cuGraphDestroy / cuGraphExecDestroy: a destroyed handle
// is forgotten at once, so the driver may hand it out again for a graph that holds nothing; an exec's node table no
// handle names any more is retired: its nodes stay for a report about a launch still running, and are the first to
// go when the bound (65,536 node records) needs room.
#include <gtest/gtest.h>

#include "shim/common/driver.h"
#include "shim/record/graph_capture.h"
#include "shim/record/recorder.h"

namespace cdsa {

// The driver calls graph_capture makes: a stream's id (its handle's value) and, for clones, the clone's node of an
// original one (the original's handle + 1). The node queries are absent: cdsa then cannot pair unknown nodes.
const Driver& driver() noexcept {
  static const Driver d = [] {
    Driver t;
    t.StreamGetId = [](CUstream s, unsigned long long* id) {
      *id = reinterpret_cast<uintptr_t>(s);
      return CUDA_SUCCESS;
    };
    t.GraphNodeFindInClone = [](CUgraphNode* out, CUgraphNode orig, CUgraph) {
      *out = reinterpret_cast<CUgraphNode>(reinterpret_cast<uintptr_t>(orig) + 1);
      return CUDA_SUCCESS;
    };
    return t;
  }();
  return d;
}

namespace {

template <typename H>
H handle(uintptr_t v) {
  return reinterpret_cast<H>(v);
}

// Captures `launches` launches on `stream` into `graph` (null: the capture failed); returns the capture's graph entry.
uint32_t capture(uintptr_t stream, int launches, CUgraph graph) {
  note_capture_begin(handle<CUstream>(stream), false);
  uint32_t id = 0;
  for (int i = 0; i < launches; ++i) {
    InCdsa guard;
    LaunchRecord r{};
    r.stream_id = stream;
    note_captured_launch(guard, &r);
    id = static_cast<uint32_t>(r.graph_id);
  }
  note_capture_end(handle<CUstream>(stream), false, graph);
  return id;
}

// The node table a launch of `exec` runs, as shim/record/launch.cc reads it (0: none).
uint32_t table_of(CUgraphExec exec) {
  uint32_t id = handle_map_get(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(exec));
  return id == kNoString ? 0 : id;
}

// A kernel node's parameters, told apart by gridDimX.
KernelNodeDesc kernel(unsigned grid_x) {
  KernelNodeDesc k;
  k.grid[0] = grid_x;
  return k;
}

std::vector<unsigned> grids(const std::vector<GraphNodeRecord>& nodes) {
  std::vector<unsigned> out;
  for (const auto& n : nodes) out.push_back(n.launch.grid[0]);
  return out;
}

class GraphLifetime : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(recorder_init());
    graph_capture_init();
  }
};

TEST_F(GraphLifetime, NodesStayWhileAnExecNamesThemAndGoWithTheLast) {
  auto graph = handle<CUgraph>(0x1000);
  auto exec = handle<CUgraphExec>(0x2000);
  uint32_t entry = capture(0x10, 3, graph);
  ASSERT_NE(entry, 0u);
  note_graph_instantiate(exec, graph);
  uint32_t table = table_of(exec);
  ASSERT_NE(table, 0u);
  EXPECT_EQ(captured_nodes(table).size(), 3u);

  note_graph_destroy(graph);  // common: the graph is dropped once instantiated
  EXPECT_EQ(captured_nodes(table).size(), 3u);
  auto other = handle<CUgraphExec>(0x2001);
  note_graph_instantiate(other, graph);  // the handle is forgotten: a new graph there holds nothing
  EXPECT_EQ(table_of(other), 0u);

  note_graph_destroy(exec);  // the last handle: a launch of it may still be running, and fault
  EXPECT_EQ(table_of(exec), 0u);
  EXPECT_EQ(captured_nodes(table).size(), 3u);
}

TEST_F(GraphLifetime, RetiredTablesMakeRoomWhenTheBoundIsReachedAndLiveGraphsStay) {
  auto kept = handle<CUgraph>(0x3000), dropped = handle<CUgraph>(0x3001);
  uint32_t kept_entry = capture(0x20, 2, kept);
  capture(0x21, 4, dropped);
  auto exec = handle<CUgraphExec>(0x4000), exec2 = handle<CUgraphExec>(0x4001);
  note_graph_instantiate(exec, kept);
  note_graph_instantiate(exec2, dropped);
  uint32_t kept_table = table_of(exec), dropped_table = table_of(exec2);
  note_graph_destroy(exec);  // the graph still names its nodes
  note_graph_destroy(exec2);
  note_graph_destroy(dropped);
  EXPECT_EQ(captured_nodes(dropped_table).size(), 4u);  // retired, kept until the room is needed
  EXPECT_EQ(captured_nodes(kept_table).size(), 2u);

  // A live graph of 65,536 captured launches: the bound is reached, the retired tables go, the live graphs stay.
  auto big = handle<CUgraph>(0x3002);
  uint32_t big_entry = capture(0x22, 1 << 16, big);
  EXPECT_TRUE(captured_nodes(dropped_table).empty());
  EXPECT_TRUE(captured_nodes(kept_table).empty());
  EXPECT_EQ(captured_nodes(kept_entry).size(), 2u);
  const size_t big_kept = captured_nodes(big_entry).size();
  EXPECT_GT(big_kept, 65'000u);
  EXPECT_LT(big_kept, size_t{1} << 16);  // the bound holds: live graphs' nodes are never evicted
  // A table that does not fit says so.
  auto exec3 = handle<CUgraphExec>(0x4002);
  note_graph_instantiate(exec3, big);
  GraphTableInfo info;
  EXPECT_TRUE(graph_nodes(table_of(exec3), &info).empty());
  EXPECT_TRUE(info.incomplete);
  note_graph_destroy(exec3);
  note_graph_destroy(big);
  note_graph_destroy(kept);
  EXPECT_TRUE(captured_nodes(big_entry).empty());
}

TEST_F(GraphLifetime, AFailedCaptureKeepsNoNodes) {
  uint32_t id = capture(0x30, 2, nullptr);
  ASSERT_NE(id, 0u);
  EXPECT_TRUE(captured_nodes(id).empty());
}

// cuStreamBeginRecaptureToGraph: the recaptured kernels replace the graph's kernel records node for node, keep their
// nodes' handles, and leave execs made before alone; a recapture that does not match (another count), or fails, marks
// the graph unfollowed (never the bound's "incomplete").
TEST_F(GraphLifetime, ARecaptureReplacesTheGraphsKernelsNodeForNode) {
  auto recapture = [](uintptr_t stream, std::vector<unsigned> grid, CUgraph graph, CUgraph ended) {
    note_recapture_begin(handle<CUstream>(stream), false, graph);
    for (unsigned gx : grid) {
      InCdsa guard;
      LaunchRecord r{};
      r.stream_id = stream;
      r.grid[0] = gx;
      note_captured_launch(guard, &r);
    }
    note_capture_end(handle<CUstream>(stream), false, ended);
  };
  auto g = handle<CUgraph>(0x5800);
  auto n1 = handle<CUgraphNode>(0x5810), n2 = handle<CUgraphNode>(0x5820);
  note_kernel_node_added(g, n1, kernel(1), "cuGraphAddKernelNode_v2");
  note_kernel_node_added(g, n2, kernel(2), "cuGraphAddKernelNode_v2");
  auto before = handle<CUgraphExec>(0x5830);
  note_graph_instantiate(before, g);
  recapture(0x58, {3, 4}, g, g);
  auto after = handle<CUgraphExec>(0x5831);
  note_graph_instantiate(after, g);
  GraphTableInfo info;
  std::vector<GraphNodeRecord> now = graph_nodes(table_of(after), &info);
  EXPECT_EQ(grids(now), (std::vector<unsigned>{3, 4}));
  EXPECT_EQ(now[0].origin, NodeOrigin::Captured);
  EXPECT_FALSE(info.unfollowed || info.incomplete);
  EXPECT_EQ(grids(graph_nodes(table_of(before))), (std::vector<unsigned>{1, 2}));  // made before: unchanged
  note_kernel_node_set(n2, kernel(5), "cuGraphKernelNodeSetParams_v2");  // the handle still names node 2
  auto later = handle<CUgraphExec>(0x5832);
  note_graph_instantiate(later, g);
  EXPECT_EQ(grids(graph_nodes(table_of(later))), (std::vector<unsigned>{3, 5}));
  // Three kernels into a graph of two: both kept, and the graph is unfollowed.
  recapture(0x58, {6, 7, 8}, g, g);
  auto odd = handle<CUgraphExec>(0x5833);
  note_graph_instantiate(odd, g);
  EXPECT_EQ(grids(graph_nodes(table_of(odd), &info)), (std::vector<unsigned>{3, 5, 6, 7, 8}));
  EXPECT_TRUE(info.unfollowed);
  EXPECT_FALSE(info.incomplete);
  // A failed recapture (cuStreamEndCapture gives no graph): its graph is unfollowed.
  auto h = handle<CUgraph>(0x5900);
  note_kernel_node_added(h, handle<CUgraphNode>(0x5910), kernel(1), "cuGraphAddKernelNode_v2");
  recapture(0x59, {2}, h, nullptr);
  auto failed = handle<CUgraphExec>(0x5930);
  note_graph_instantiate(failed, h);
  graph_nodes(table_of(failed), &info);
  EXPECT_TRUE(info.unfollowed);
  for (CUgraphExec x : {before, after, later, odd, failed}) note_graph_destroy(x);
  note_graph_destroy(g);
  note_graph_destroy(h);
}

// ---- nodes built and changed through the graph calls

TEST_F(GraphLifetime, ExecChangesMakeANewVersionOnlyAfterALaunch) {
  auto g = handle<CUgraph>(0x5000);
  auto n1 = handle<CUgraphNode>(0x5100), n2 = handle<CUgraphNode>(0x5200);
  note_kernel_node_added(g, n1, kernel(1), "cuGraphAddKernelNode_v2");
  note_kernel_node_added(g, n2, kernel(2), "cuGraphAddKernelNode_v2");
  auto exec = handle<CUgraphExec>(0x5300);
  note_graph_instantiate(exec, g);
  uint32_t v1 = table_of(exec);
  EXPECT_EQ(grids(graph_nodes(v1)), (std::vector<unsigned>{1, 2}));
  note_exec_kernel_node_set(exec, n2, kernel(3), "cuGraphExecKernelNodeSetParams_v2");  // not launched: in place
  EXPECT_EQ(table_of(exec), v1);
  note_table_launched(v1);  // a replay ran v1
  note_exec_kernel_node_set(exec, n2, kernel(4), "cuGraphExecKernelNodeSetParams_v2");
  uint32_t v2 = table_of(exec);
  ASSERT_NE(v2, v1);
  EXPECT_EQ(grids(graph_nodes(v1)), (std::vector<unsigned>{1, 3}));  // what that replay ran
  std::vector<GraphNodeRecord> now = graph_nodes(v2);
  EXPECT_EQ(grids(now), (std::vector<unsigned>{1, 4}));
  EXPECT_EQ(now[0].origin, NodeOrigin::Added);
  EXPECT_EQ(now[1].origin, NodeOrigin::Changed);
  EXPECT_STREQ(string_at(now[1].call), "cuGraphExecKernelNodeSetParams_v2");
  EXPECT_FALSE(now[1].uncertain);
  // A change in the graph is for later instantiations; a disabled node is no candidate.
  note_kernel_node_set(n1, kernel(5), "cuGraphKernelNodeSetParams_v2");
  EXPECT_EQ(grids(graph_nodes(table_of(exec))), (std::vector<unsigned>{1, 4}));
  note_exec_node_enabled(exec, n1, false);
  EXPECT_EQ(grids(graph_nodes(table_of(exec))), (std::vector<unsigned>{4}));
  auto exec2 = handle<CUgraphExec>(0x5301);
  note_graph_instantiate(exec2, g);
  EXPECT_EQ(grids(graph_nodes(table_of(exec2))), (std::vector<unsigned>{5, 2}));
  for (CUgraphExec x : {exec, exec2}) note_graph_destroy(x);
  note_graph_destroy(g);
}

TEST_F(GraphLifetime, AChangeCdsaCannotPairKeepsEveryCandidate) {
  // A captured node (no handle known) changed in the exec, and the driver cannot be asked: old and new stay.
  auto g = handle<CUgraph>(0x6000);
  capture(0x40, 1, g);
  auto exec = handle<CUgraphExec>(0x6100);
  note_graph_instantiate(exec, g);
  note_exec_kernel_node_set(exec, handle<CUgraphNode>(0x6200), kernel(7), "cuGraphExecKernelNodeSetParams_v2");
  std::vector<GraphNodeRecord> nodes = graph_nodes(table_of(exec));
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_TRUE(nodes[0].uncertain && nodes[1].uncertain);
  EXPECT_EQ(nodes[0].origin, NodeOrigin::Captured);
  EXPECT_EQ(nodes[1].launch.grid[0], 7u);

  // cuGraphExecUpdate: the exec takes the new graph's nodes; a handle of the old graph then names any of them.
  auto a = handle<CUgraph>(0x6300), b = handle<CUgraph>(0x6301);
  auto na = handle<CUgraphNode>(0x6400), nb1 = handle<CUgraphNode>(0x6401), nb2 = handle<CUgraphNode>(0x6402);
  note_kernel_node_added(a, na, kernel(1), "cuGraphAddNode_v2");
  note_kernel_node_added(b, nb1, kernel(2), "cuGraphAddNode_v2");
  note_kernel_node_added(b, nb2, kernel(3), "cuGraphAddNode_v2");
  auto x = handle<CUgraphExec>(0x6500);
  note_graph_instantiate(x, a);
  note_exec_update(x, b);
  EXPECT_EQ(grids(graph_nodes(table_of(x))), (std::vector<unsigned>{2, 3}));
  note_exec_kernel_node_set(x, na, kernel(9), "cuGraphExecNodeSetParams");
  nodes = graph_nodes(table_of(x));
  EXPECT_EQ(grids(nodes), (std::vector<unsigned>{2, 3, 9}));
  for (const auto& n : nodes) EXPECT_TRUE(n.uncertain);
  note_exec_kernel_node_set(x, nb1, kernel(8), "cuGraphExecNodeSetParams");  // the new graph's own handle: exact
  EXPECT_EQ(grids(graph_nodes(table_of(x))), (std::vector<unsigned>{8, 3, 9}));
  for (CUgraphExec e : {exec, x}) note_graph_destroy(e);
  for (CUgraph h : {g, a, b}) note_graph_destroy(h);
}

// Issue 26: a child node made with CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE owns the child graph itself, so a kernel
// added to the child's handle afterwards is the node's (a copy would miss it and name the other node alone); and it
// goes with the parent.
TEST_F(GraphLifetime, AMovedChildGraphIsTheNodesOwnFollowedLive) {
  auto child = handle<CUgraph>(0x9000), parent = handle<CUgraph>(0x9001);
  note_kernel_node_added(child, handle<CUgraphNode>(0x9100), kernel(1), "cuGraphAddKernelNode_v2");
  note_child_node_added(parent, handle<CUgraphNode>(0x9101), child, /*moved=*/true);
  note_kernel_node_added(child, handle<CUgraphNode>(0x9102), kernel(2), "cuGraphAddKernelNode_v2");  // after the move
  auto exec = handle<CUgraphExec>(0x9200);
  note_graph_instantiate(exec, parent);
  EXPECT_EQ(grids(graph_nodes(table_of(exec))), (std::vector<unsigned>{1, 2}));
  note_graph_destroy(parent);  // the moved child goes with it: its handle names nothing of it any more
  auto fresh = handle<CUgraphExec>(0x9201);
  note_graph_instantiate(fresh, child);
  EXPECT_TRUE(graph_nodes(table_of(fresh)).empty());
}

// Issue 26: a launch captured on a stream that joined one of two captures running (an event wait on a capturing
// stream) is in neither record: both graphs are marked incomplete, never exact on a node.
TEST_F(GraphLifetime, ALaunchJoinedToOneOfTwoCapturesMarksBothIncomplete) {
  note_capture_begin(handle<CUstream>(0x61), false);
  note_capture_begin(handle<CUstream>(0x62), false);
  {
    InCdsa guard;
    LaunchRecord r{};
    r.stream_id = 0x63;  // joined: its own capture never began
    note_captured_launch(guard, &r);
    EXPECT_EQ(r.graph_id, 0u);
  }
  auto a = handle<CUgraph>(0x9300), b = handle<CUgraph>(0x9301);
  note_capture_end(handle<CUstream>(0x61), false, a);
  note_capture_end(handle<CUstream>(0x62), false, b);
  for (auto [g, x] : {std::pair{a, handle<CUgraphExec>(0x9400)}, std::pair{b, handle<CUgraphExec>(0x9401)}}) {
    note_graph_instantiate(x, g);
    GraphTableInfo info;
    graph_nodes(table_of(x), &info);
    EXPECT_TRUE(info.unfollowed);
    EXPECT_FALSE(info.incomplete);  // nothing was dropped for the bound
  }
  // One capture alone: the joined stream's launch is that capture's, and nothing is missing.
  note_capture_begin(handle<CUstream>(0x64), false);
  {
    InCdsa guard;
    LaunchRecord r{};
    r.stream_id = 0x65;
    note_captured_launch(guard, &r);
    EXPECT_NE(r.graph_id, 0u);
  }
  auto c = handle<CUgraph>(0x9302);
  note_capture_end(handle<CUstream>(0x64), false, c);
  note_graph_instantiate(handle<CUgraphExec>(0x9402), c);
  GraphTableInfo info;
  EXPECT_EQ(graph_nodes(table_of(handle<CUgraphExec>(0x9402)), &info).size(), 1u);
  EXPECT_FALSE(info.incomplete);
}

TEST_F(GraphLifetime, ChildGraphsClonesAndConditionalBodies) {
  auto child = handle<CUgraph>(0x7000), parent = handle<CUgraph>(0x7001);
  capture(0x50, 1, child);  // a child graph holding a captured kernel
  auto cn = handle<CUgraphNode>(0x7100);
  note_child_node_added(parent, cn, child);
  note_kernel_node_added(child, handle<CUgraphNode>(0x7101), kernel(6), "cuGraphAddKernelNode");  // not in the copy
  auto exec = handle<CUgraphExec>(0x7200);
  note_graph_instantiate(exec, parent);
  std::vector<GraphNodeRecord> nodes = graph_nodes(table_of(exec));
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].origin, NodeOrigin::Captured);
  // The exec's child replaced by another graph.
  auto other = handle<CUgraph>(0x7002);
  note_kernel_node_added(other, handle<CUgraphNode>(0x7102), kernel(2), "cuGraphAddKernelNode_v2");
  note_exec_child_set(exec, cn, other);
  EXPECT_EQ(grids(graph_nodes(table_of(exec))), (std::vector<unsigned>{2}));

  // A clone: its nodes are found by the driver's cuGraphNodeFindInClone (here handle + 1).
  auto g = handle<CUgraph>(0x7300), copy = handle<CUgraph>(0x7301);
  auto n = handle<CUgraphNode>(0x7400);
  note_kernel_node_added(g, n, kernel(1), "cuGraphAddKernelNode_v2");
  note_graph_clone(copy, g);
  note_kernel_node_set(handle<CUgraphNode>(0x7401), kernel(4), "cuGraphKernelNodeSetParams_v2");
  auto xg = handle<CUgraphExec>(0x7500), xc = handle<CUgraphExec>(0x7501);
  note_graph_instantiate(xg, g);
  note_graph_instantiate(xc, copy);
  EXPECT_EQ(grids(graph_nodes(table_of(xg))), (std::vector<unsigned>{1}));
  EXPECT_EQ(grids(graph_nodes(table_of(xc))), (std::vector<unsigned>{4}));

  // A conditional node's bodies are live graphs: nodes added to them later are the node's.
  auto cg = handle<CUgraph>(0x7600), body = handle<CUgraph>(0x7601);
  note_conditional_node_added(cg, handle<CUgraphNode>(0x7700), &body, 1);
  note_kernel_node_added(body, handle<CUgraphNode>(0x7701), kernel(3), "cuGraphAddKernelNode_v2");
  auto xb = handle<CUgraphExec>(0x7800);
  note_graph_instantiate(xb, cg);
  nodes = graph_nodes(table_of(xb));
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(nodes[0].in_body);
  GraphTableInfo cinfo;
  graph_nodes(table_of(xb), &cinfo);
  EXPECT_FALSE(cinfo.unmapped_bodies);  // the original's bodies are the graphs cdsa was handed
  // A clone of it (directly, and inside a child node): the bodies' copies are graphs cdsa is never handed, so
  // nodes added to them could be missing: never exact. A clone without conditional nodes stays exact.
  auto cc = handle<CUgraph>(0x7602), holder = handle<CUgraph>(0x7603), hc = handle<CUgraph>(0x7604);
  note_graph_clone(cc, cg);
  note_child_node_added(holder, handle<CUgraphNode>(0x7702), cg);
  note_graph_clone(hc, holder);
  auto xcc = handle<CUgraphExec>(0x7802), xhc = handle<CUgraphExec>(0x7803);
  note_graph_instantiate(xcc, cc);
  note_graph_instantiate(xhc, hc);
  for (CUgraphExec e : {xcc, xhc}) {
    GraphTableInfo i;
    EXPECT_EQ(graph_nodes(table_of(e), &i).size(), 1u);
    EXPECT_TRUE(i.unmapped_bodies);
    note_graph_destroy(e);
  }
  GraphTableInfo plain;
  graph_nodes(table_of(xc), &plain);
  EXPECT_FALSE(plain.unmapped_bodies);
  for (CUgraph h : {cc, holder, hc}) note_graph_destroy(h);
  // Device-updatable nodes: the table is marked, never exact.
  note_device_updatable(handle<CUgraphNode>(0x7701));
  auto xd = handle<CUgraphExec>(0x7801);
  note_graph_instantiate(xd, cg);
  GraphTableInfo info;
  graph_nodes(table_of(xd), &info);
  EXPECT_TRUE(info.device_changes);
  note_graph_instantiate(xg, g, /*device_launch=*/true);
  graph_nodes(table_of(xg), &info);
  EXPECT_TRUE(info.device_changes);
  for (CUgraphExec e : {exec, xg, xc, xb, xd}) note_graph_destroy(e);
  for (CUgraph h : {child, parent, other, g, copy, cg}) note_graph_destroy(h);
}

}  // namespace
}  // namespace cdsa
