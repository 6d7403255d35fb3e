// Graph-capture bookkeeping (shim/record/graph_capture.h) against cuGraphDestroy / cuGraphExecDestroy: a destroyed handle
// is forgotten at once, so the driver may hand it out again for a graph that captured nothing; a capture no handle
// names any more is retired: its nodes stay for a report about a launch still running, and are the first to go
// when the bound (65,536 captured launches) needs room.
#include <gtest/gtest.h>

#include "shim/common/driver.h"
#include "shim/record/graph_capture.h"
#include "shim/record/recorder.h"

namespace cdsa {

// The one driver call graph_capture makes: a stream's id, here its handle's value.
const Driver& driver() noexcept {
  static const Driver d = [] {
    Driver t;
    t.StreamGetId = [](CUstream s, unsigned long long* id) {
      *id = reinterpret_cast<uintptr_t>(s);
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

// Captures `launches` launches on `stream` into `graph` (null: the capture failed); returns its capture id.
uint32_t capture(uintptr_t stream, int launches, CUgraph graph) {
  note_capture_begin(handle<CUstream>(stream), false);
  uint32_t id = 0;
  for (int i = 0; i < launches; ++i) {
    InCdsa guard;
    LaunchRecord r{};
    r.stream_id = stream;
    note_captured_launch(guard, &r);
    id = r.graph_id;
  }
  note_capture_end(handle<CUstream>(stream), false, graph);
  return id;
}

// The capture a launch of `exec` is attributed to, as shim/record/launch.cc reads it (0: none).
uint32_t capture_of(CUgraphExec exec) {
  uint32_t id = handle_map_get(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(exec));
  return id == kNoString ? 0 : id;
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
  uint32_t id = capture(0x10, 3, graph);
  ASSERT_NE(id, 0u);
  note_graph_instantiate(exec, graph);
  EXPECT_EQ(capture_of(exec), id);
  EXPECT_EQ(captured_nodes(id).size(), 3u);

  note_graph_destroy(graph);  // common: the graph is dropped once instantiated
  EXPECT_EQ(captured_nodes(id).size(), 3u);
  auto other = handle<CUgraphExec>(0x2001);
  note_graph_instantiate(other, graph);  // the handle is forgotten: a new graph there captured nothing
  EXPECT_EQ(capture_of(other), 0u);

  note_graph_destroy(exec);  // the last handle: a launch of it may still be running, and fault
  EXPECT_EQ(capture_of(exec), 0u);
  EXPECT_EQ(captured_nodes(id).size(), 3u);
}

TEST_F(GraphLifetime, RetiredCapturesMakeRoomWhenTheBoundIsReachedAndLiveOnesStay) {
  auto kept = handle<CUgraph>(0x3000), dropped = handle<CUgraph>(0x3001);
  uint32_t kept_id = capture(0x20, 2, kept);
  uint32_t dropped_id = capture(0x21, 4, dropped);
  ASSERT_NE(kept_id, dropped_id);
  auto exec = handle<CUgraphExec>(0x4000);
  note_graph_instantiate(exec, kept);
  note_graph_destroy(exec);  // the graph still names them
  note_graph_destroy(dropped);
  EXPECT_EQ(captured_nodes(dropped_id).size(), 4u);  // retired, kept until the room is needed
  EXPECT_EQ(captured_nodes(kept_id).size(), 2u);

  // A live graph of 65,536 captured launches: the bound is reached, the retired captures go, the live ones stay.
  auto big = handle<CUgraph>(0x3002);
  uint32_t big_id = capture(0x22, 1 << 16, big);
  EXPECT_TRUE(captured_nodes(dropped_id).empty());
  EXPECT_EQ(captured_nodes(kept_id).size(), 2u);
  const size_t big_kept = captured_nodes(big_id).size();
  EXPECT_GT(big_kept, 65'000u);
  EXPECT_LT(big_kept, size_t{1} << 16);  // the bound holds: the live graphs' nodes are never evicted
  note_graph_destroy(big);
  note_graph_destroy(kept);
  EXPECT_EQ(captured_nodes(kept_id).size(), 2u);  // retired again, nothing needs the room yet
}

TEST_F(GraphLifetime, AFailedCaptureKeepsNoNodes) {
  uint32_t id = capture(0x30, 2, nullptr);
  ASSERT_NE(id, 0u);
  EXPECT_TRUE(captured_nodes(id).empty());
}

}  // namespace
}  // namespace cdsa
