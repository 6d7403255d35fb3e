// The graph bookkeeping (graph_capture.h): graph entries and node tables, stream capture, and the report's view;
// the graph-building and exec calls are graph_calls.cc.
#include "shim/record/graph_capture.h"

#include <algorithm>
#include <cstring>

#include "shim/common/driver.h"
#include "shim/record/graph_capture_internal.h"

namespace cdsa {

// The launch path's name cache (shim/record/launch.h), declared weak: the bookkeeping's unit test links no launch
// path, and its nodes are then unnamed.
[[gnu::weak]] uint32_t kernel_name_id(const InCdsa&, CUfunction func) noexcept;

namespace graph_capture_internal {
std::atomic<int> g_captures_active{0};
std::atomic<uint32_t> g_launched[kLaunchedSlots];

std::atomic<bool> g_ready{false};
std::mutex g_mutex;
uint32_t g_next_id = 0;
std::map<uint64_t, uint32_t>* g_capture_by_stream = nullptr;
std::unordered_map<uintptr_t, uint32_t>* g_entry_by_graph = nullptr;
std::unordered_map<uintptr_t, uint32_t>* g_table_by_exec = nullptr;
std::map<uint32_t, Entry>* g_entries = nullptr;
std::map<uint32_t, Table>* g_tables = nullptr;
size_t g_records = 0;

uint32_t name_of(const InCdsa& guard, CUfunction f) { return &kernel_name_id ? kernel_name_id(guard, f) : kNoString; }

uint64_t stream_id_of(const InCdsa&, CUstream s) {
  unsigned long long id = 0;
  if (driver().StreamGetId) driver().StreamGetId(s, &id);
  return id;
}

size_t records_in(const std::vector<NodeRec>& v) { return v.size(); }

// Room for `n` more records: retired tables go first (oldest first). Under g_mutex.
bool room_for(size_t n) {
  for (auto it = g_tables->begin(); g_records + n > kMaxRecords && it != g_tables->end();) {
    if (!it->second.retired) {
      ++it;
      continue;
    }
    g_records -= records_in(it->second.nodes);
    it = g_tables->erase(it);
  }
  return g_records + n <= kMaxRecords;
}

uint32_t new_entry(bool owned) {
  uint32_t id = ++g_next_id;
  (*g_entries)[id].owned = owned;
  return id;
}

void drop_entry(uint32_t id) {
  auto it = g_entries->find(id);
  if (it == g_entries->end()) return;
  std::vector<uint32_t> owned;
  for (auto& n : it->second.nodes) owned.insert(owned.end(), n.bodies.begin(), n.bodies.end());
  g_records -= records_in(it->second.nodes);
  g_entries->erase(it);
  for (uint32_t b : owned) drop_entry(b);
}

// The entry of `graph`, made on first sight (a graph cdsa saw no call for, e.g. a child node's copy it was handed).
Entry* entry_of(CUgraph graph, uint32_t* id_out) {
  if (!graph) return nullptr;
  auto [it, fresh] = g_entry_by_graph->try_emplace(reinterpret_cast<uintptr_t>(graph), 0);
  if (fresh) it->second = new_entry(false);
  if (id_out) *id_out = it->second;
  return &(*g_entries)[it->second];
}

bool add_record(std::vector<NodeRec>& v, NodeRec n, bool* incomplete) {
  if (!room_for(1)) {
    if (incomplete) *incomplete = true;
    return false;
  }
  v.push_back(std::move(n));
  ++g_records;
  return true;
}

// A node kept for hours (a graph captured at the start, replayed at the end) keeps its stack and strings.
void pin_record(NodeRec& n) {
  n.pins = IdPins(n.rec.launch.stack_id, n.rec.launch.kernel_name, n.rec.call);
  n.rec.launch.stack_id = n.pins.stack();
  n.rec.launch.kernel_name = n.pins.string(0);
  n.rec.call = n.pins.string(1);
}

// A kernel node record made now, on the calling thread (its stack).
NodeRec kernel_record(const KernelNodeDesc& k, const char* call, NodeOrigin origin) {
  InCdsa guard;
  NodeRec n;
  n.type = CU_GRAPH_NODE_TYPE_KERNEL;
  LaunchRecord& r = n.rec.launch;
  r.kernel_name = name_of(guard, k.func);
  for (int i = 0; i < 3; ++i) r.grid[i] = k.grid[i], r.block[i] = k.block[i];
  r.shared_mem = k.shared_mem;
  r.stack_id = capture_and_intern_stack();
  n.rec.call = call ? intern_string(call, strlen(call)) : kNoString;
  n.rec.origin = origin;
  pin_record(n);
  return n;
}

bool has_handle(const NodeRec& n, uintptr_t h) { return std::find(n.handles.begin(), n.handles.end(), h) != n.handles.end(); }

// The driver's view of node `h`: its kernel and dims (the graph's node; exec changes do not alter it). False when
// it is no kernel node or the driver cannot say.
bool driver_kernel_node(CUgraphNode h, LaunchRecord* out) {
  const Driver& d = driver();
  if (!d.GraphNodeGetType || !d.GraphKernelNodeGetParams) return false;
  InCdsa guard;
  CUgraphNodeType type;
  if (d.GraphNodeGetType(h, &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_KERNEL) return false;
  CUDA_KERNEL_NODE_PARAMS_v2 p{};
  if (d.GraphKernelNodeGetParams(h, &p) != CUDA_SUCCESS) return false;
  KernelNodeDesc k = kernel_node_desc(p);
  out->kernel_name = name_of(guard, k.func);
  for (int i = 0; i < 3; ++i) out->grid[i] = k.grid[i], out->block[i] = k.block[i];
  return true;
}

bool same_kernel(const LaunchRecord& a, const LaunchRecord& b) {
  return a.kernel_name == b.kernel_name && std::equal(a.grid, a.grid + 3, b.grid) &&
         std::equal(a.block, a.block + 3, b.block);
}

// The kernel records node `h` may be, and whether that is certain. A record holding the handle; else, after an
// exec update, any record (the driver's pairing is its own); else the records cdsa holds no handle for (captured
// nodes, copies) that match the driver's view of the node, learning the handle when exactly one does.
std::vector<size_t> targets_of(std::vector<NodeRec>& v, uintptr_t h, const std::vector<uintptr_t>* pre_update,
                               bool* certain) {
  std::vector<size_t> out;
  for (size_t i = 0; i < v.size(); ++i)
    if (has_handle(v[i], h)) out.push_back(i);
  if (out.empty() && pre_update && std::find(pre_update->begin(), pre_update->end(), h) != pre_update->end())
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i].type == CU_GRAPH_NODE_TYPE_KERNEL && v[i].top == 0) out.push_back(i);
  if (!out.empty()) {
    *certain = out.size() == 1;
    return out;
  }
  LaunchRecord seen;
  bool known = driver_kernel_node(reinterpret_cast<CUgraphNode>(h), &seen);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].type == CU_GRAPH_NODE_TYPE_KERNEL && v[i].handles.empty() && v[i].top == 0 &&
        (!known || same_kernel(v[i].rec.launch, seen)))
      out.push_back(i);
  *certain = out.size() == 1 && known;
  if (*certain) v[out[0]].handles.push_back(h);
  return out;
}

// Node `h` of `v` becomes `fresh`: in place when certain; else the records it may be stay, marked uncertain, and
// the new work joins them. Returns false when no record could be `h` (the new work is listed all the same).
bool apply_change(std::vector<NodeRec>& v, uintptr_t h, NodeRec fresh, const std::vector<uintptr_t>* pre_update,
                  bool* incomplete) {
  bool certain = false;
  std::vector<size_t> t = targets_of(v, h, pre_update, &certain);
  if (certain) {
    NodeRec& old = v[t[0]];
    old.rec.launch = fresh.rec.launch;
    old.rec.call = fresh.rec.call;
    old.pins = fresh.pins;
    old.rec.origin = fresh.rec.origin;
    old.rec.uncertain = false;
    return true;
  }
  for (size_t i : t) v[i].rec.uncertain = true;
  fresh.rec.uncertain = true;
  fresh.handles = {h};
  add_record(v, std::move(fresh), incomplete);
  return !t.empty();
}

// `e`'s kernel nodes flattened into `out`: child copies and conditional bodies inlined (their nodes keep the
// top-level node they came from).
void flatten(const Entry& e, uintptr_t top, bool in_body, std::vector<NodeRec>& out, GraphTableInfo* info) {
  info->device_changes |= e.device_changes;
  info->unpaired_change |= e.unpaired_change;
  info->unmapped_bodies |= e.unmapped_bodies;
  info->incomplete |= e.incomplete;
  info->unfollowed |= e.unfollowed;
  for (const NodeRec& n : e.nodes) {
    uintptr_t t = top ? top : (n.handles.empty() ? 0 : n.handles.front());
    if (n.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      NodeRec c = n;
      c.top = top;
      c.rec.in_body |= in_body;
      out.push_back(std::move(c));
    }
    for (uint32_t b : n.bodies) {
      auto it = g_entries->find(b);
      if (it != g_entries->end())
        flatten(it->second, t, in_body || n.type == CU_GRAPH_NODE_TYPE_CONDITIONAL, out, info);
    }
  }
}

// A deep copy of entry `id` (bodies too) as a new entry; the copy holds no handles (the driver's copy has its own).
uint32_t copy_entry(uint32_t id, bool owned, bool keep_handles) {
  auto it = g_entries->find(id);
  uint32_t out = new_entry(owned);
  if (it == g_entries->end()) return out;
  Entry src = it->second;  // copied: new entries may move the map's nodes
  Entry& dst = (*g_entries)[out];
  dst.device_changes = src.device_changes;
  dst.unpaired_change = src.unpaired_change;
  dst.unmapped_bodies = src.unmapped_bodies;
  dst.incomplete = src.incomplete;
  dst.unfollowed = src.unfollowed;
  for (NodeRec n : src.nodes) {
    if (!keep_handles) n.handles.clear();
    // Deeper levels never keep handles: the copy's bodies are other graphs of the driver's, with nodes of their own
    // (learnt again by note_child_graph_of).
    for (uint32_t& b : n.bodies) b = copy_entry(b, true, false);
    bool dummy = false;
    add_record((*g_entries)[out].nodes, std::move(n), &dummy);
  }
  return out;
}

// The entry holding node `h` (a handle cdsa was given), or null.
Entry* entry_holding(uintptr_t h, size_t* index) {
  for (auto& [id, e] : *g_entries)
    for (size_t i = 0; i < e.nodes.size(); ++i)
      if (has_handle(e.nodes[i], h)) {
        *index = i;
        return &e;
      }
  return nullptr;
}

// The exec's table, ready to change: itself when no launch may have run it since it was made, else a copy with a
// new id (the old one retired, kept for a report about that launch). Null when cdsa knows no table for it.
Table* table_for_change(CUgraphExec exec) {
  auto it = g_table_by_exec->find(reinterpret_cast<uintptr_t>(exec));
  if (it == g_table_by_exec->end()) return nullptr;
  uint32_t cur = it->second;
  auto t = g_tables->find(cur);
  if (t == g_tables->end()) return nullptr;
  using graph_capture_internal::g_launched;
  using graph_capture_internal::kLaunchedSlots;
  // Edited in place only when it is known never to have been launched: its slot below its id (note_table_launched:
  // a launch of `cur` leaves the slot at cur or above for good). A later table of the same slot that launched makes
  // this one a copy too, which costs a copy and never a wrong table.
  if (g_launched[cur % kLaunchedSlots].load(std::memory_order_acquire) < cur) return &t->second;
  bool fits = room_for(t->second.nodes.size());
  t = g_tables->find(cur);  // room_for erases retired tables only; this one is live
  uint32_t id = ++g_next_id;
  Table copy = t->second;
  t->second.retired = true;
  if (!fits) {
    copy.nodes.clear();
    copy.info.incomplete = true;
  }
  g_records += copy.nodes.size();
  Table& fresh = (*g_tables)[id] = std::move(copy);
  it->second = id;
  handle_map_put(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(exec), id);
  return &fresh;
}

void retire_table(uint32_t id) {
  auto t = g_tables->find(id);
  if (t != g_tables->end()) t->second.retired = true;
}


}  // namespace graph_capture_internal

using namespace graph_capture_internal;

void graph_capture_init() noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_entries) return;
  g_capture_by_stream = new std::map<uint64_t, uint32_t>;
  g_entry_by_graph = new std::unordered_map<uintptr_t, uint32_t>;
  g_table_by_exec = new std::unordered_map<uintptr_t, uint32_t>;
  g_entries = new std::map<uint32_t, Entry>;
  g_tables = new std::map<uint32_t, Table>;
  g_ready.store(true, std::memory_order_release);
}

// ---- stream capture

namespace {
void begin_capture(CUstream stream, bool per_thread, uintptr_t recapture_of) {
  if (!ready()) return;
  InCdsa guard;
  uint64_t id = stream_id_of(guard, effective_stream(stream, per_thread));
  std::lock_guard<std::mutex> lock(g_mutex);
  // Noted once: the driver accepts no second capture on a capturing stream, so an entry already there is this very
  // capture, seen by a wrapper and by the CUPTI backend both.
  auto [at, fresh] = g_capture_by_stream->try_emplace(id, 0);
  if (!fresh) return;
  at->second = new_entry(false);
  (*g_entries)[at->second].recapture_of = recapture_of;
  g_captures_active.fetch_add(1, std::memory_order_acq_rel);
}

// Recapture `src` (a recapture's entry) into `dst` (its graph's): node for node when both hold only kernels, as
// many (a recapture that succeeded has the graph's topology, so its kernels are the graph's kernel nodes in
// creation order, each with its new launch); false when they do not match, and nothing is changed.
bool replace_recaptured(Entry& dst, Entry& src) {
  if (dst.nodes.size() != src.nodes.size()) return false;
  for (const NodeRec& n : dst.nodes)
    if (n.type != CU_GRAPH_NODE_TYPE_KERNEL || !n.bodies.empty()) return false;
  for (const NodeRec& n : src.nodes)
    if (n.type != CU_GRAPH_NODE_TYPE_KERNEL || !n.bodies.empty()) return false;
  for (size_t i = 0; i < dst.nodes.size(); ++i) {
    NodeRec n = std::move(src.nodes[i]);
    n.handles = std::move(dst.nodes[i].handles);  // the same node: cuGraphGetNodes still names it so
    n.enabled = dst.nodes[i].enabled;
    dst.nodes[i] = std::move(n);
  }
  src.nodes.clear();
  return true;
}
}  // namespace

void note_capture_begin(CUstream stream, bool per_thread) noexcept { begin_capture(stream, per_thread, 0); }

namespace {
std::atomic<bool> g_cig_work{false};
}  // namespace

void note_cig_capture_end(CUstream stream, bool per_thread) noexcept {
  g_cig_work.store(true, std::memory_order_release);
  note_capture_end(stream, per_thread, nullptr);  // no graph: the entry and its records go
}

bool cig_work_recorded() noexcept { return g_cig_work.load(std::memory_order_acquire); }

void note_recapture_begin(CUstream stream, bool per_thread, CUgraph graph) noexcept {
  begin_capture(stream, per_thread, reinterpret_cast<uintptr_t>(graph));
}

void note_capture_end(CUstream stream, bool per_thread, CUgraph graph) noexcept {
  if (!ready()) return;
  InCdsa guard;
  uint64_t id = stream_id_of(guard, effective_stream(stream, per_thread));
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_capture_by_stream->find(id);
  if (it == g_capture_by_stream->end()) return;
  uint32_t captured = it->second;
  g_capture_by_stream->erase(it);
  g_captures_active.fetch_sub(1, std::memory_order_acq_rel);
  auto cap = g_entries->find(captured);
  const uintptr_t recapture_of = cap != g_entries->end() ? cap->second.recapture_of : 0;
  if (!graph) {  // a failed capture: nothing names its nodes, and nothing can launch them
    // A failed recapture leaves its graph "in an undefined state" (cuda.h): which nodes run what is not known.
    if (auto g = g_entry_by_graph->find(recapture_of); recapture_of && g != g_entry_by_graph->end())
      (*g_entries)[g->second].unfollowed = true;
    drop_entry(captured);
    return;
  }
  auto [at, fresh] = g_entry_by_graph->try_emplace(reinterpret_cast<uintptr_t>(graph), captured);
  if (fresh) return;
  auto src = g_entries->find(captured);
  if (src != g_entries->end() && recapture_of == reinterpret_cast<uintptr_t>(graph)) {
    Entry& e = (*g_entries)[at->second];
    e.incomplete |= src->second.incomplete;
    e.unfollowed |= src->second.unfollowed;
    const size_t replaced = src->second.nodes.size();
    if (replace_recaptured(e, src->second)) {
      g_records -= replaced;  // the graph's records were replaced one for one; the recapture's entry goes
      g_entries->erase(src);
      return;
    }
    e.unfollowed = true;  // the recapture's kernels join the old records below: both listed, neither named
  }
  // Captured into an existing graph (cuStreamBeginCaptureToGraph): the nodes join the graph's own.
  if (src != g_entries->end()) {
    (*g_entries)[at->second].incomplete |= src->second.incomplete;
    (*g_entries)[at->second].unfollowed |= src->second.unfollowed;
    std::vector<NodeRec> nodes = std::move(src->second.nodes);
    g_records -= nodes.size();
    g_entries->erase(src);
    Entry& e = (*g_entries)[at->second];
    for (auto& n : nodes) {
      e.nodes.push_back(std::move(n));
      ++g_records;
    }
  }
}

void note_captured_launch(const InCdsa&, LaunchRecord* r) noexcept {
  if (!ready()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_capture_by_stream->find(r->stream_id);
  if (it == g_capture_by_stream->end() && g_capture_by_stream->size() == 1) it = g_capture_by_stream->begin();  // joined
  if (it == g_capture_by_stream->end()) {
    // A stream that joined one of several captures (an event wait on a capturing stream): which one is not known
    // here, so the kernel is in none, and every capture running may lack it.
    for (auto& [stream, entry] : *g_capture_by_stream) (*g_entries)[entry].unfollowed = true;
    return;
  }
  r->graph_id = it->second;
  NodeRec n;
  n.rec.launch = *r;
  n.rec.origin = NodeOrigin::Captured;
  pin_record(n);
  add_record((*g_entries)[it->second].nodes, std::move(n), nullptr);
}

// ---- the report's view

std::vector<GraphNodeRecord> graph_nodes(uint64_t id, GraphTableInfo* info) {
  std::vector<GraphNodeRecord> out;
  if (info) *info = GraphTableInfo{};
  if (!ready() || id == 0) return out;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<NodeRec> flat;
  GraphTableInfo found;
  if (auto t = g_tables->find(static_cast<uint32_t>(id)); t != g_tables->end()) {
    flat = t->second.nodes;
    found = t->second.info;
  } else if (auto e = g_entries->find(static_cast<uint32_t>(id)); e != g_entries->end()) {
    flatten(e->second, 0, false, flat, &found);
  } else {
    return out;
  }
  found.found = true;
  if (info) *info = found;
  for (const NodeRec& n : flat) {
    if (!n.enabled) continue;
    GraphNodeRecord r = n.rec;
    r.launch.graph_id = id;
    if (r.origin == NodeOrigin::Captured) r.launch.flags |= kFlagCaptured;
    out.push_back(r);
  }
  return out;
}

std::vector<LaunchRecord> captured_nodes(uint64_t id) {
  std::vector<LaunchRecord> out;
  for (const auto& n : graph_nodes(id)) out.push_back(n.launch);
  return out;
}

}  // namespace cdsa
