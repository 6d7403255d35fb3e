// The graph bookkeeping's state and helpers (shim/record/graph_capture.h), shared by its two files: graph_capture.cc
// (the entries and node tables, stream capture, the report's view) and graph_calls.cc (the graph-building and exec
// calls). Everything here runs under g_mutex, off the launch path.
// Internal to shim/record/: the bookkeeping's own files include it, nothing else.
// Contract: everything here runs under g_mutex and allocates, as graph_capture.h's setup-time calls do.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shim/record/graph_capture.h"

#pragma GCC visibility push(hidden)
namespace cdsa::graph_capture_internal {

// One node as cdsa keeps it: in a graph's entry (kernel, child, conditional and other nodes) or in a node table
// (kernel nodes only, flattened).
struct NodeRec {
  GraphNodeRecord rec;
  IdPins pins;  // rec's stack, kernel name and call, pinned in the recorder while the record lives (recorder.h)
  IdPins update_pins;  // rec's update_stack and update_call (an exec update gave the exec this node)
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_KERNEL;
  std::vector<uintptr_t> handles;  // the CUgraphNode handles that may name it (none: a captured node, or a copy)
  std::vector<uint32_t> bodies;    // child graph node: its copy of the child; conditional node: its bodies
  uintptr_t top = 0;               // in a table: the top-level child/conditional node it came from (0: itself)
  bool enabled = true;
};

struct Entry {  // one CUgraph (or a body: a child node's copy, a conditional node's body)
  std::vector<NodeRec> nodes;
  bool device_changes = false;
  bool unpaired_change = false;
  // A clone holding conditional nodes: the driver's copies of their bodies are graphs cdsa is never handed (only
  // cuGraphNodeGetParams names them), so nodes added to them later would be missing from its replays.
  bool unmapped_bodies = false;
  bool owned = false;  // a body: goes with its node's graph
  // Some of its kernels were not kept (`incomplete`: the bound), or what they run is not known (`unfollowed`: a
  // launch captured while several captures ran, on a stream none of them began on, joined to one through an event
  // wait: cdsa cannot tell which; a recapture that failed or did not match). Its replays are never exact on a node.
  bool incomplete = false;  // the bound was reached: some records were not kept
  bool unfollowed = false;  // a launch or a recapture cdsa could not follow into it (cuStreamEndCapture)
  // A recapture's own entry while it runs (note_recapture_begin): the graph whose nodes it replaces.
  uintptr_t recapture_of = 0;
};

struct Table {  // what one version of an exec runs
  std::vector<NodeRec> nodes;
  GraphTableInfo info;
  std::vector<uintptr_t> pre_update;  // after cuGraphExecUpdate: the handles of the nodes it replaced
  bool retired = false;
};

constexpr size_t kMaxRecords = 1 << 16;

extern std::atomic<bool> g_ready;
extern std::mutex g_mutex;
extern uint32_t g_next_id;                                    // entries and tables share one id space, from 1
extern std::map<uint64_t, uint32_t>* g_capture_by_stream;     // stream id -> entry id
extern std::unordered_map<uintptr_t, uint32_t>* g_entry_by_graph;
extern std::unordered_map<uintptr_t, uint32_t>* g_table_by_exec;
extern std::map<uint32_t, Entry>* g_entries;
extern std::map<uint32_t, Table>* g_tables;
extern size_t g_records;  // node records in entries and tables
// A destroyed CUgraphExec's entry in the lock-free exec map (which has no erase): no table.
constexpr uint32_t kNoTable = 0;

inline bool ready() { return g_ready.load(std::memory_order_acquire); }

// The launch path's kernel-name cache, when it is linked (the bookkeeping's unit test links none: nodes unnamed).
uint32_t name_of(const InCdsa& guard, CUfunction f);
uint64_t stream_id_of(const InCdsa&, CUstream s);
size_t records_in(const std::vector<NodeRec>& v);
// Room for `n` more records: retired tables go first (oldest first). Under g_mutex.
bool room_for(size_t n);
uint32_t new_entry(bool owned);
void drop_entry(uint32_t id);
// The entry of `graph`, made on first sight (a graph cdsa saw no call for, e.g. a child node's copy it was handed).
Entry* entry_of(CUgraph graph, uint32_t* id_out = nullptr);
bool add_record(std::vector<NodeRec>& v, NodeRec n, bool* incomplete);
// A node kept for hours (a graph captured at the start, replayed at the end) keeps its stack and strings.
void pin_record(NodeRec& n);
// A kernel node record made now, on the calling thread (its stack).
NodeRec kernel_record(const KernelNodeDesc& k, const char* call, NodeOrigin origin);
bool has_handle(const NodeRec& n, uintptr_t h);
// The driver's view of node `h`: its kernel and dims (the graph's node; exec changes do not alter it). False when
// it is no kernel node or the driver cannot say.
bool driver_kernel_node(CUgraphNode h, LaunchRecord* out);
bool same_kernel(const LaunchRecord& a, const LaunchRecord& b);
// The kernel records node `h` may be, and whether that is certain (graph_capture.cc says how).
std::vector<size_t> targets_of(std::vector<NodeRec>& v, uintptr_t h, const std::vector<uintptr_t>* pre_update,
                               bool* certain);
// Node `h` of `v` becomes `fresh`: in place when certain; else the records it may be stay, marked uncertain, and
// the new work joins them. Returns false when no record could be `h` (the new work is listed all the same).
bool apply_change(std::vector<NodeRec>& v, uintptr_t h, NodeRec fresh, const std::vector<uintptr_t>* pre_update,
                  bool* incomplete);
// `e`'s kernel nodes flattened into `out`: child copies and conditional bodies inlined (their nodes keep the
// top-level node they came from).
void flatten(const Entry& e, uintptr_t top, bool in_body, std::vector<NodeRec>& out, GraphTableInfo* info);
// A deep copy of entry `id` (bodies too) as a new entry; the copy holds no handles (the driver's copy has its own).
uint32_t copy_entry(uint32_t id, bool owned, bool keep_handles);
// The entry holding node `h` (a handle cdsa was given), or null.
Entry* entry_holding(uintptr_t h, size_t* index);
// The exec's table, ready to change: itself when no launch may have run it since it was made, else a copy with a
// new id (the old one retired, kept for a report about that launch). Null when cdsa knows no table for it.
Table* table_for_change(CUgraphExec exec);
void retire_table(uint32_t id);

}  // namespace cdsa::graph_capture_internal
#pragma GCC visibility pop
