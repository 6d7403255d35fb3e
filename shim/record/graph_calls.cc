// The graph-building and exec calls' notes (shim/record/graph_capture.h): graphs made node by node, changed,
// cloned, instantiated, updated and destroyed.
#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "shim/common/driver.h"
#include "shim/common/thread_block.h"
#include "shim/record/graph_capture_internal.h"

namespace cdsa {

using namespace graph_capture_internal;

// ---- graphs

void note_kernel_node_added(CUgraph graph, CUgraphNode node, const KernelNodeDesc& k, const char* call) noexcept {
  if (!ready() || !graph || !node) return;
  NodeRec n = kernel_record(k, call, NodeOrigin::Added);
  n.handles.push_back(reinterpret_cast<uintptr_t>(node));
  std::lock_guard<std::mutex> lock(g_mutex);
  Entry* e = entry_of(graph);
  add_record(e->nodes, std::move(n), nullptr);
}

void note_other_node_added(CUgraph graph, CUgraphNode node, CUgraphNodeType type) noexcept {
  (void)graph, (void)node, (void)type;  // kept as what they are: no kernel, never a candidate
}

void note_child_node_added(CUgraph graph, CUgraphNode node, CUgraph child, bool moved) noexcept {
  if (!ready() || !graph || !node) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  uint32_t child_id = 0;
  entry_of(child, &child_id);
  NodeRec n;
  n.type = CU_GRAPH_NODE_TYPE_GRAPH;
  n.handles.push_back(reinterpret_cast<uintptr_t>(node));
  if (moved) {
    // CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE: the child graph itself is the node's now (cuda.h: "owned by the parent
    // and will be destroyed when the parent is destroyed"): nodes added to its handle later are the node's, so the
    // body is the child's own entry, followed live, and goes with the parent (a copy would miss them).
    (*g_entries)[child_id].owned = true;
    n.bodies.push_back(child_id);
  } else {
    n.bodies.push_back(copy_entry(child_id, true, false));  // the node holds a copy of the child, as the driver does
  }
  add_record(entry_of(graph)->nodes, std::move(n), nullptr);
}

void note_conditional_node_added(CUgraph graph, CUgraphNode node, const CUgraph* bodies, unsigned count) noexcept {
  if (!ready() || !graph || !node) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  NodeRec n;
  n.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  n.handles.push_back(reinterpret_cast<uintptr_t>(node));
  for (unsigned i = 0; bodies && i < count; ++i) {
    uint32_t id = 0;
    entry_of(bodies[i], &id);  // a live graph of its own: nodes are added to it later
    (*g_entries)[id].owned = true;
    n.bodies.push_back(id);
  }
  add_record(entry_of(graph)->nodes, std::move(n), nullptr);
}

void note_child_graph_of(CUgraphNode node, CUgraph embedded) noexcept {
  if (!ready() || !node || !embedded) return;
  const Driver& d = driver();
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t i = 0;
  Entry* e = entry_holding(reinterpret_cast<uintptr_t>(node), &i);
  if (!e || e->nodes[i].type != CU_GRAPH_NODE_TYPE_GRAPH || e->nodes[i].bodies.empty()) return;
  const uint32_t body = e->nodes[i].bodies.front();
  auto [at, fresh] = g_entry_by_graph->try_emplace(reinterpret_cast<uintptr_t>(embedded), body);
  if (!fresh) at->second = body;  // a handle the driver reused: it names the node's graph now
  (*g_entries)[body].owned = true;
  // The embedded graph's kernel nodes: a handle for each record the driver's view names alone.
  if (!d.GraphGetNodes) return;
  size_t count = 0;
  InCdsa guard;
  if (d.GraphGetNodes(embedded, nullptr, &count) != CUDA_SUCCESS || count == 0 || count > 4096) return;
  std::vector<CUgraphNode> handles(count);
  if (d.GraphGetNodes(embedded, handles.data(), &count) != CUDA_SUCCESS) return;
  handles.resize(count);
  std::vector<std::pair<uintptr_t, LaunchRecord>> views;
  for (CUgraphNode h : handles) {
    LaunchRecord seen;
    if (h && driver_kernel_node(h, &seen)) views.emplace_back(reinterpret_cast<uintptr_t>(h), seen);
  }
  std::vector<NodeRec>& recs = (*g_entries)[body].nodes;
  for (const auto& [h, seen] : views) {
    size_t same_view = 0, match = 0, at_rec = 0;
    for (const auto& [h2, other] : views) same_view += same_kernel(seen, other);
    bool known = false;
    for (size_t j = 0; j < recs.size(); ++j) {
      if (recs[j].type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
      if (has_handle(recs[j], h)) known = true;
      if (recs[j].handles.empty() && same_kernel(recs[j].rec.launch, seen)) ++match, at_rec = j;
    }
    if (!known && same_view == 1 && match == 1) recs[at_rec].handles.push_back(h);
  }
}

void note_node_destroy(CUgraphNode node) noexcept {
  if (!ready() || !node) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t i = 0;
  Entry* e = entry_holding(reinterpret_cast<uintptr_t>(node), &i);
  if (!e) return;
  std::vector<uint32_t> bodies = e->nodes[i].bodies;
  e->nodes.erase(e->nodes.begin() + static_cast<ptrdiff_t>(i));
  --g_records;
  for (auto& [h, id] : *g_entry_by_graph)
    if (std::find(bodies.begin(), bodies.end(), id) != bodies.end()) id = 0;
  std::erase_if(*g_entry_by_graph, [](const auto& kv) { return kv.second == 0; });
  for (uint32_t b : bodies) drop_entry(b);
}

// Whether entry `id` holds a conditional node with bodies, at any depth (child copies included).
bool holds_conditional_bodies(uint32_t id, int depth = 0) {
  auto it = g_entries->find(id);
  if (it == g_entries->end() || depth > 64) return false;
  for (const NodeRec& n : it->second.nodes) {
    if (n.type == CU_GRAPH_NODE_TYPE_CONDITIONAL && !n.bodies.empty()) return true;
    for (uint32_t b : n.bodies)
      if (holds_conditional_bodies(b, depth + 1)) return true;
  }
  return false;
}

// A clone's top-level conditional node `n` (its handles already the clone's): the driver's graphs of its bodies, from
// cuGraphNodeGetParams (13.2+), each found from then on as the body entry cdsa copied for it, so nodes added to it
// later are the node's. True when every body was mapped.
// Proof: cuda.h says the pointers cuGraphNodeGetParams returns are "driver-owned memory associated with the node",
// so phGraph_out[j] is the node's own body j (the order the bodies were made in, which copy_entry keeps); a node whose
// answer is not a conditional node with exactly as many bodies maps nothing and keeps the clone never exact.
bool map_clone_bodies(const Driver& d, const NodeRec& n) {
  if (!d.GraphNodeGetParams || n.handles.empty()) return false;
  CUgraphNodeParams p{};
  {
    InCdsa guard;
    if (d.GraphNodeGetParams(reinterpret_cast<CUgraphNode>(n.handles.front()), &p) != CUDA_SUCCESS) return false;
  }
  if (p.type != CU_GRAPH_NODE_TYPE_CONDITIONAL || !p.conditional.phGraph_out || p.conditional.size != n.bodies.size())
    return false;
  for (unsigned j = 0; j < p.conditional.size; ++j)
    if (!p.conditional.phGraph_out[j]) return false;
  for (unsigned j = 0; j < p.conditional.size; ++j) {
    CDSA_DCHECK(g_entries->count(n.bodies[j]) == 1);
    auto [at, fresh] = g_entry_by_graph->try_emplace(reinterpret_cast<uintptr_t>(p.conditional.phGraph_out[j]),
                                                     n.bodies[j]);
    if (!fresh) at->second = n.bodies[j];  // a handle the driver reused: it names this body now
  }
  return true;
}

void note_graph_clone(CUgraph clone, CUgraph original) noexcept {
  if (!ready() || !clone || !original) return;
  const Driver& d = driver();
  std::lock_guard<std::mutex> lock(g_mutex);
  uint32_t orig_id = 0;
  entry_of(original, &orig_id);
  uint32_t id = copy_entry(orig_id, false, true);
  // The clone's nodes have handles of their own: cuGraphNodeFindInClone names each (top level; deeper copies stay
  // without handles, found by the driver's view of the node when they change).
  bool unmapped = holds_conditional_bodies(id);
  Entry& e = (*g_entries)[id];
  for (NodeRec& n : e.nodes) {
    std::vector<uintptr_t> mine;
    for (uintptr_t h : n.handles) {
      CUgraphNode found = nullptr;
      InCdsa guard;
      if (d.GraphNodeFindInClone &&
          d.GraphNodeFindInClone(&found, reinterpret_cast<CUgraphNode>(h), clone) == CUDA_SUCCESS && found)
        mine.push_back(reinterpret_cast<uintptr_t>(found));
    }
    n.handles = std::move(mine);
  }
  // Its conditional bodies are the driver's copies, graphs cdsa was never handed: where cuGraphNodeGetParams names
  // them (top-level conditional nodes whose bodies hold no conditional node of their own, and no conditional node
  // inside a child copy), they are followed and the clone can be exact; otherwise never exact.
  if (unmapped) {
    bool all = true;
    for (const NodeRec& n : e.nodes) {
      for (uint32_t b : n.bodies)
        if (holds_conditional_bodies(b)) all = false;  // a deeper conditional node: its bodies have no handle here
      if (n.type == CU_GRAPH_NODE_TYPE_CONDITIONAL && !n.bodies.empty() && !map_clone_bodies(d, n)) all = false;
    }
    unmapped = !all;
  }
  e.unmapped_bodies = unmapped;
  auto [at, fresh] = g_entry_by_graph->try_emplace(reinterpret_cast<uintptr_t>(clone), id);
  if (!fresh) {
    drop_entry(at->second);
    at->second = id;
  }
}

namespace {
// The driver's view of the node a kernel-node change is about, read before the driver applies it
// (note_kernel_node_before_set), for this thread's next note_kernel_node_set of the same node.
struct NodeBefore {
  uintptr_t node = 0;
  LaunchRecord seen;
  bool known = false;
};
// In a ThreadBlock, not thread_local: libcdsa.so's static TLS stays small (shim/common/thread_block.h). A thread
// without its block notes no view: the change is then one no record pairs (conservative).
}  // namespace

void note_kernel_node_before_set(CUgraphNode node) noexcept {
  NodeBefore* b = ThreadBlock<NodeBefore>::get();
  if (!b) return;
  *b = NodeBefore{};
  if (!ready() || !node) return;
  b->node = reinterpret_cast<uintptr_t>(node);
  b->known = driver_kernel_node(node, &b->seen);
}

void note_kernel_node_set(CUgraphNode node, const KernelNodeDesc& k, const char* call) noexcept {
  NodeBefore before;
  if (NodeBefore* b = ThreadBlock<NodeBefore>::get()) {
    before = *b;
    *b = NodeBefore{};
  }
  if (!ready() || !node) return;
  NodeRec fresh = kernel_record(k, call, NodeOrigin::Changed);
  auto h = reinterpret_cast<uintptr_t>(node);
  // A node cdsa holds no handle for (a captured one) is found by what it was: the driver's view before the change
  // (after it, the view is the change itself, and matches the old record no more).
  LaunchRecord seen;
  bool known = false;
  if (before.node == h) {
    seen = before.seen;
    known = before.known;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t i = 0;
  if (Entry* e = entry_holding(h, &i)) {
    apply_change(e->nodes, h, std::move(fresh), nullptr, nullptr);
    return;
  }
  // The graph is not known either. Each graph with a node the driver's earlier view matches takes the change,
  // certain only where exactly one node of one graph matches; where none does, every graph cdsa holds unnamed
  // kernel nodes of may be the one that changed, and none of them is certain any more.
  std::vector<std::pair<Entry*, size_t>> matches;
  for (auto& [id, e] : *g_entries)
    for (size_t j = 0; j < e.nodes.size(); ++j)
      if (e.nodes[j].type == CU_GRAPH_NODE_TYPE_KERNEL && e.nodes[j].handles.empty() &&
          (known && same_kernel(e.nodes[j].rec.launch, seen)))
        matches.emplace_back(&e, j);
  if (matches.size() == 1) {
    matches[0].first->nodes[matches[0].second].handles.push_back(h);
    apply_change(matches[0].first->nodes, h, std::move(fresh), nullptr, nullptr);
    return;
  }
  for (auto& [e, j] : matches) {
    e->nodes[j].rec.uncertain = true;
    e->unpaired_change = true;
  }
  if (matches.empty())
    for (auto& [id, e] : *g_entries)
      for (const NodeRec& n : e.nodes)
        if (n.type == CU_GRAPH_NODE_TYPE_KERNEL && n.handles.empty()) {
          e.unpaired_change = true;
          break;
        }
}

void note_device_updatable(CUgraphNode node) noexcept {
  if (!ready() || !node) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t i = 0;
  if (Entry* e = entry_holding(reinterpret_cast<uintptr_t>(node), &i)) {
    e->device_changes = true;
    return;
  }
  for (auto& [id, e] : *g_entries) e.device_changes = true;  // cdsa cannot tell which graph holds it: all of them
}

// ---- execs

void note_graph_instantiate(CUgraphExec exec, CUgraph graph, bool device_launch) noexcept {
  if (!ready() || !exec) return;
  uint32_t id = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_entry_by_graph->find(reinterpret_cast<uintptr_t>(graph));
    if (it == g_entry_by_graph->end()) return;
    Table t;
    flatten((*g_entries)[it->second], 0, false, t.nodes, &t.info);
    t.info.device_changes |= device_launch;
    if (!room_for(t.nodes.size())) {
      t.nodes.clear();
      t.info.incomplete = true;
    }
    g_records += t.nodes.size();
    id = ++g_next_id;
    (*g_tables)[id] = std::move(t);
    auto [at, fresh] = g_table_by_exec->try_emplace(reinterpret_cast<uintptr_t>(exec), id);
    if (!fresh) {
      retire_table(at->second);
      at->second = id;
    }
  }
  handle_map_put(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(exec), id);
}

void note_exec_kernel_node_set(CUgraphExec exec, CUgraphNode node, const KernelNodeDesc& k, const char* call) noexcept {
  if (!ready() || !exec || !node) return;
  NodeRec fresh = kernel_record(k, call, NodeOrigin::Changed);
  std::lock_guard<std::mutex> lock(g_mutex);
  Table* t = table_for_change(exec);
  if (!t) return;
  if (!apply_change(t->nodes, reinterpret_cast<uintptr_t>(node), std::move(fresh), &t->pre_update, &t->info.incomplete))
    t->info.unpaired_change = true;
}

void note_exec_node_enabled(CUgraphExec exec, CUgraphNode node, bool enabled) noexcept {
  if (!ready() || !exec || !node) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  Table* t = table_for_change(exec);
  if (!t) return;
  bool certain = false;
  std::vector<size_t> idx = targets_of(t->nodes, reinterpret_cast<uintptr_t>(node), &t->pre_update, &certain);
  if (certain) t->nodes[idx[0]].enabled = enabled;  // not certain: every node it may be stays a candidate
}

void note_exec_child_set(CUgraphExec exec, CUgraphNode node, CUgraph child) noexcept {
  if (!ready() || !exec || !node) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  Table* t = table_for_change(exec);
  if (!t) return;
  auto h = reinterpret_cast<uintptr_t>(node);
  uint32_t child_id = 0;
  entry_of(child, &child_id);
  std::vector<NodeRec> fresh;
  flatten((*g_entries)[child_id], h, false, fresh, &t->info);
  size_t before = t->nodes.size();
  std::erase_if(t->nodes, [h](const NodeRec& n) { return n.top == h; });
  bool found = t->nodes.size() != before;
  g_records -= before - t->nodes.size();
  for (auto& n : fresh) {
    if (!found) n.rec.uncertain = true;
    add_record(t->nodes, std::move(n), &t->info.incomplete);
  }
  if (!found) t->info.unpaired_change = true;
}

void note_exec_update(CUgraphExec exec, CUgraph graph, const char* call) noexcept {
  if (!ready() || !exec) return;
  uint32_t update_stack = kUnknownStack, update_call = kNoString;
  {
    InCdsa guard;
    update_stack = capture_and_intern_stack();
    if (call) update_call = intern_string(call, strlen(call));
  }
  IdPins update_pins(update_stack, update_call);
  std::lock_guard<std::mutex> lock(g_mutex);
  Table* t = table_for_change(exec);
  if (!t) return;
  // The exec takes the new graph's nodes. Which old node each pairs with is the driver's business: the old
  // handles name any of them from now on (candidate sets, never a guess).
  std::vector<uintptr_t> old;
  for (const NodeRec& n : t->nodes) old.insert(old.end(), n.handles.begin(), n.handles.end());
  old.insert(old.end(), t->pre_update.begin(), t->pre_update.end());
  uint32_t id = 0;
  entry_of(graph, &id);
  std::vector<NodeRec> fresh;
  GraphTableInfo info;
  flatten((*g_entries)[id], 0, false, fresh, &info);
  for (NodeRec& n : fresh) {  // each node the exec now runs came by this call
    n.update_pins = update_pins;
    n.rec.update_stack = n.update_pins.stack();
    n.rec.update_call = n.update_pins.string(0);
  }
  g_records -= t->nodes.size();
  t->nodes.clear();
  t->info = info;
  t->pre_update = std::move(old);
  if (!room_for(fresh.size())) {
    t->info.incomplete = true;
    return;
  }
  g_records += fresh.size();
  t->nodes = std::move(fresh);
}

void note_graph_destroy(CUgraph graph) noexcept {
  if (!ready() || !graph) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_entry_by_graph->find(reinterpret_cast<uintptr_t>(graph));
  if (it == g_entry_by_graph->end()) return;
  uint32_t id = it->second;
  g_entry_by_graph->erase(it);
  auto e = g_entries->find(id);
  if (e != g_entries->end() && e->second.owned) return;  // a body: it goes with its node's graph
  std::vector<uint32_t> bodies;
  if (e != g_entries->end())
    for (auto& n : e->second.nodes) bodies.insert(bodies.end(), n.bodies.begin(), n.bodies.end());
  std::erase_if(*g_entry_by_graph, [&](const auto& kv) {
    return std::find(bodies.begin(), bodies.end(), kv.second) != bodies.end();
  });
  drop_entry(id);
}

void note_graph_destroy(CUgraphExec exec) noexcept {
  if (!ready() || !exec) return;
  auto key = reinterpret_cast<uintptr_t>(exec);
  handle_map_put(HandleMap::GraphExec, key, kNoTable);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_table_by_exec->find(key);
  if (it == g_table_by_exec->end()) return;
  retire_table(it->second);  // a launch of it may still be running, and fault
  g_table_by_exec->erase(it);
}

}  // namespace cdsa
