// Graph bookkeeping, for attributing a fault in a graph replay: which kernel nodes each graph holds, however they
// were made (stream capture, graph-building calls, child graphs, clones, conditional bodies) or changed, and which
// nodes each executable graph ran at each of its launches.
//
// Every CUgraph cdsa sees has an entry: its kernel nodes, each with its kernel name, grid/block, the stack of the
// call that made or last changed it, and the node handles that may name it; child-graph and conditional nodes refer
// to the entries of their bodies (a child graph node holds a copy of the child, as the driver does; a conditional
// node's bodies are live graphs of their own). While a stream captures, each launch on it is recorded (not run) into
// the capture's entry. cuGraphInstantiate flattens a graph's entry into a *node table* (its id is the exec's
// version): the table is what a later cuGraphLaunch of that exec runs, so the launch path stores the table's id in
// the launch record (LaunchRecord::graph_id). A change of the exec (cuGraphExec*SetParams, cuGraphNodeSetEnabled,
// cuGraphExecUpdate, cuGraphExecChildGraphNodeSetParams) makes a new table with a new id when the current one may
// have been launched (exec changes apply to later launches only), so a replay is reported with the nodes it ran.
//
// Never a wrong certainty: a change whose node cdsa cannot tell for sure (a handle it never saw, such as a captured
// node's, matched against the driver's view of the node; a node named by a handle of the graph an exec was updated
// from, whose pairing the driver keeps to itself) keeps the old records as well as the new one, all marked
// uncertain: they stay candidates, and the device's assert text decides between them. Device-updatable kernel nodes
// and graphs instantiated for device launch change in ways cdsa cannot follow: their tables are marked inexact.
//
// Lifetimes: cuGraphDestroy drops the graph's entry; cuGraphExecDestroy and a newer version retire a table: its
// nodes stay for a report about a launch still running, and are the first to go when the bound (65,536 node
// records in all) needs room.
//
// Contract: setup-time work under one mutex (graph calls, capture begin/end, a launch made while capturing, the
// report's `graph_nodes`), never on the path of an ordinary launch: that path reads only `captures_active()`, one
// atomic load, and a graph launch adds `note_table_launched`, one load (and a compare-exchange when its slot is
// behind). Everything is a no-op before `graph_capture_init` (warm-up). The driver queries it makes (node type,
// kernel node parameters, clone lookup) go straight to libcuda (shim/common/driver.h).
// Every kept kernel node pins its stack, kernel name and call string in the recorder (IdPins, shim/record/
// recorder.h "Holding ids") for as long as cdsa keeps the node: a graph captured at the start and replayed hours
// later still names its capture-time stacks however many stacks were reclaimed meanwhile.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/check.h"
#include "shim/common/reentrancy.h"
#include "shim/record/recorder.h"

namespace cdsa {

void graph_capture_init() noexcept;

void note_capture_begin(CUstream stream, bool per_thread) noexcept;
// cuStreamBeginRecaptureToGraph (13.3): a capture into `graph` whose work replaces, in creation order, what the
// graph's existing nodes run. At its end the graph's kernel records are the recaptured ones (each keeping its
// node's handles) when the graph held as many kernel nodes and nothing else; else the recaptured records join the
// old ones and the graph is unfollowed (GraphTableInfo: never exact on a node). A recapture that fails leaves the
// graph "in an undefined state" (cuda.h): unfollowed.
void note_recapture_begin(CUstream stream, bool per_thread, CUgraph graph) noexcept;
// cuStreamEndCaptureToCig (13.1): the CIG capture begun on `stream` (noted as a capture: no breadcrumb went in) ends;
// its launches are a graphics command list's, which runs later, outside CUDA's streams. From then on work cdsa does
// not follow may be what faults (cig_work_recorded).
void note_cig_capture_end(CUstream stream, bool per_thread) noexcept;
bool cig_work_recorded() noexcept;
void note_capture_end(CUstream stream, bool per_thread, CUgraph graph) noexcept;
// device_launch: CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH (the exec may be launched from the device).
void note_graph_instantiate(CUgraphExec exec, CUgraph graph, bool device_launch = false) noexcept;
// Before the driver destroys the handle (it may then come back for another graph).
void note_graph_destroy(CUgraph graph) noexcept;
void note_graph_destroy(CUgraphExec exec) noexcept;

// A kernel node's parameters as the graph calls give them (CUDA_KERNEL_NODE_PARAMS_v1/v2/v3): `func`, or the
// CUkernel `kern` cast to CUfunction when func is NULL (the name cache asks cuKernelGetName for it).
struct KernelNodeDesc {
  CUfunction func = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
};
template <class P>
KernelNodeDesc kernel_node_desc(const P& p) noexcept {
  KernelNodeDesc d;
  d.func = p.func;
  if constexpr (requires { p.kern; })
    if (!d.func) d.func = reinterpret_cast<CUfunction>(p.kern);
  d.grid[0] = p.gridDimX, d.grid[1] = p.gridDimY, d.grid[2] = p.gridDimZ;
  d.block[0] = p.blockDimX, d.block[1] = p.blockDimY, d.block[2] = p.blockDimZ;
  d.shared_mem = p.sharedMemBytes;
  return d;
}

// The graph-building calls, after the driver accepted them. `call` is the entry point's exported name (static
// storage), kept with the node as what made or last changed it; the calling thread's stack is recorded with it.
void note_kernel_node_added(CUgraph graph, CUgraphNode node, const KernelNodeDesc& k, const char* call) noexcept;
void note_other_node_added(CUgraph graph, CUgraphNode node, CUgraphNodeType type) noexcept;
// `moved`: CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE (cuGraphAddNode's CUDA_CHILD_GRAPH_NODE_PARAMS): the node owns the
// child graph itself, not a copy of it.
void note_child_node_added(CUgraph graph, CUgraphNode node, CUgraph child, bool moved = false) noexcept;
void note_conditional_node_added(CUgraph graph, CUgraphNode node, const CUgraph* bodies, unsigned count) noexcept;
// cuGraphChildGraphNodeGetGraph: `embedded` is child node `node`'s own graph (the driver's copy of the child, which
// cdsa keeps as the node's body): nodes added to it or changed in it are the node's. Its nodes' handles are learnt
// for the body's records where the driver's view of a node matches exactly one record and no other node.
void note_child_graph_of(CUgraphNode node, CUgraph embedded) noexcept;
void note_node_destroy(CUgraphNode node) noexcept;
void note_graph_clone(CUgraph clone, CUgraph original) noexcept;
// cuGraphKernelNodeSetParams[_v2], cuGraphNodeSetParams: `before_set` just before the driver sees the call (the
// driver's view of the node as it was), `set` after it accepted the change, on the same thread.
void note_kernel_node_before_set(CUgraphNode node) noexcept;
void note_kernel_node_set(CUgraphNode node, const KernelNodeDesc& k, const char* call) noexcept;
void note_device_updatable(CUgraphNode node) noexcept;
// The exec calls (later launches run the change).
void note_exec_kernel_node_set(CUgraphExec exec, CUgraphNode node, const KernelNodeDesc& k, const char* call) noexcept;
void note_exec_node_enabled(CUgraphExec exec, CUgraphNode node, bool enabled) noexcept;
void note_exec_child_set(CUgraphExec exec, CUgraphNode node, CUgraph child) noexcept;
// `call`: the entry point (cuGraphExecUpdate[_v2]); its stack (the calling thread's) is kept with every node the
// exec takes from `graph`, shown beside the node's own capture/add/change stack.
void note_exec_update(CUgraphExec exec, CUgraph graph, const char* call = nullptr) noexcept;

namespace graph_capture_internal {
[[gnu::visibility("hidden")]] extern std::atomic<int> g_captures_active;
constexpr uint32_t kLaunchedSlots = 4096;
[[gnu::visibility("hidden")]] extern std::atomic<uint32_t> g_launched[kLaunchedSlots];
}  // namespace graph_capture_internal
// Whether any stream is capturing now (the launch path asks before cuStreamIsCapturing).
inline bool captures_active() noexcept {
  return graph_capture_internal::g_captures_active.load(std::memory_order_acquire) > 0;
}
// A graph launch ran node table `table` (the launch path, lock-free): a later change of its exec must not alter it.
// Each slot keeps the highest table id launched among the ids it holds (id % kLaunchedSlots), so a launched table
// leaves its slot at or above its own id for good: a slot below an id proves that table never launched, and a slot
// at or above it (this table, or a later one of the same slot) keeps it from being edited in place
// (graph_capture.cc, table_for_change). Tables and entries share one id counter, so ids 4,096 apart meet often.
inline void note_table_launched(uint32_t table) noexcept {
  std::atomic<uint32_t>& slot = graph_capture_internal::g_launched[table % graph_capture_internal::kLaunchedSlots];
  uint32_t seen = slot.load(std::memory_order_acquire);
  while (seen < table && !slot.compare_exchange_weak(seen, table, std::memory_order_acq_rel)) {
  }
  CDSA_DCHECK(slot.load(std::memory_order_relaxed) >= table);  // what table_for_change's proof reads
}

// A launch made while its stream captures: sets r->graph_id to the capture's graph entry and keeps the record as a
// kernel node of it. Takes the mutex.
void note_captured_launch(const InCdsa&, LaunchRecord* r) noexcept;

// One kernel node as the report reads it.
enum class NodeOrigin : uint8_t { Captured, Added, Changed };
struct GraphNodeRecord {
  LaunchRecord launch;        // kernel_name, grid, block, shared_mem, stack_id; graph_id = the table (or entry) id
  uint32_t call = kNoString;  // StringTable id of the call that made or last changed it (captured: none)
  NodeOrigin origin = NodeOrigin::Captured;
  bool uncertain = false;     // a change cdsa could not pair for sure: the replay ran this node or another listed
  bool in_body = false;       // inside a conditional node's body: it ran only if the condition chose its body
  // The exec took this node from another graph by cuGraphExecUpdate[_v2]: that call's stack and name (else
  // kUnknownStack / kNoString).
  uint32_t update_stack = kUnknownStack;
  uint32_t update_call = kNoString;
};
struct GraphTableInfo {
  bool found = false;
  bool device_changes = false;  // device-updatable nodes or device launch: cdsa cannot follow every change
  bool unpaired_change = false; // a change named a node cdsa could not find: the new work is listed, maybe more
  bool unmapped_bodies = false; // a clone's conditional bodies: nodes added to them later are not known
  bool incomplete = false;      // the bound was reached: some nodes were not kept
  bool unfollowed = false;      // a capture cdsa could not follow (several at once, a failed recapture)
};
// The kernel nodes (enabled ones) of node table `id`, or of graph entry `id` (report path; takes the mutex,
// allocates).
std::vector<GraphNodeRecord> graph_nodes(uint64_t id, GraphTableInfo* info = nullptr);
// The same as LaunchRecords (the tests' and older callers' view).
std::vector<LaunchRecord> captured_nodes(uint64_t id);

}  // namespace cdsa
