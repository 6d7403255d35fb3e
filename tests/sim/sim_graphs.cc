// cdsa simulated CUDA driver (tests only): stream capture (also into an existing graph), and graphs built node by
// node, cloned, instantiated, updated and launched.
// See README.md for the contract and sim_internal.h for the shared state.

#include "sim_internal.h"

#include <algorithm>

namespace sim {

bool valid_mode(CUstreamCaptureMode mode) {
  return mode == CU_STREAM_CAPTURE_MODE_GLOBAL || mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         mode == CU_STREAM_CAPTURE_MODE_RELAXED;
}

GraphNode* node_locked(CUgraphNode h) {
  auto it = S().nodes.find(h);
  return it == S().nodes.end() ? nullptr : it->second;
}

GraphData* graph_locked(CUgraph h) {
  if (h == nullptr) return nullptr;
  if (GraphData* g = find_locked(&Sim::graphs, h)) return g;
  auto it = S().bodies.find(h);
  return it == S().bodies.end() ? nullptr : it->second;
}

// Initialised, then the state of the context of stream `h` (the current one's if `h` names none).
CUresult enter_stream(CUstream h, bool ptsz) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  CUctx_st* c = t_current;
  {
    Lock lk(S().mu);
    StreamP s;
    if (resolve_locked(h, ptsz, s) == CUDA_SUCCESS) c = s->ctx.ctx;
  }
  return observe(c);
}

// Initialised, then the state of graph exec `x`'s context.
CUresult enter_exec(CUgraphExec x) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return observe(ctx_of(&Sim::execs, x));
}

// What a capture is: into a graph (new, or `target`), a recapture of `target`'s nodes (cuStreamBeginRecaptureToGraph),
// or into a graphics client's command list (cuStreamBeginCaptureToCig: Stream::cig).
enum class CaptureKind { Graph, Recapture, Cig };

// Starts capture into `target` (an existing graph), or into a new graph when null.
CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptsz, CUgraph target = nullptr,
                       const CUgraphNode* dependencies = nullptr, size_t num_dependencies = 0,
                       CaptureKind kind = CaptureKind::Graph) {
  std::vector<GraphNode*> first_deps;
  CUresult r = enter_stream(h, ptsz);
  if (r != CUDA_SUCCESS) return r;
  if (!valid_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  GraphData* into = nullptr;
  if (target != nullptr) {
    into = graph_locked(target);
    if (into == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (num_dependencies != 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < num_dependencies; ++i) {
      GraphNode* d = node_locked(dependencies[i]);
      if (d == nullptr || d->owner != into) return CUDA_ERROR_INVALID_VALUE;
      first_deps.push_back(d);
    }
  }
  if (s->kind == Stream::Legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  s->capturing = true;
  s->capture_mode = mode;
  s->capture_thread = std::this_thread::get_id();
  s->capture_target = target;
  s->cig = kind == CaptureKind::Cig;
  if (into != nullptr) {
    into->captured_to_graph = true;
    into->recapture = kind == CaptureKind::Recapture;
    into->recapture_failed = false;
    into->recapture_next = 0;
    into->capture_tail = nullptr;  // the capture's first node depends on the nodes given
    into->capture_first_deps = std::move(first_deps);
    s->capture = into;
  } else {
    s->capture_owned = std::make_unique<GraphData>();
    s->capture = s->capture_owned.get();
  }
  ++g.capturing;
  return CUDA_SUCCESS;
}

// cuStreamBeginCaptureToGraph, cuStreamBeginRecaptureToGraph: a graph is required.
CUresult begin_capture_to_graph(CUstream h, CUstreamCaptureMode mode, bool ptsz, CUgraph target,
                                const CUgraphNode* dependencies, size_t num_dependencies,
                                CaptureKind kind = CaptureKind::Graph) {
  if (target == nullptr) {
    CUresult r = enter_stream(h, ptsz);
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
  }
  return begin_capture(h, mode, ptsz, target, dependencies, num_dependencies, kind);
}

void end_capture_locked(Stream& s) {
  if (s.capture != nullptr) {  // a recapture's state goes with it, however it ends
    s.capture->recapture = s.capture->recapture_failed = false;
    s.capture->recapture_next = 0;
  }
  s.cig = false;
  s.capturing = false;
  s.capture = nullptr;
  s.capture_target = nullptr;
  s.capture_owned.reset();
  --S().capturing;
}

bool graph_in_capture_locked(CUgraph graph) {
  Sim& g = S();
  for (auto& [h, s] : g.streams)
    if (s->capturing && s->capture_target == graph) return true;
  for (auto& s : g.per_thread)
    if (s->capturing && s->capture_target == graph) return true;
  return false;
}

CUresult end_capture(CUstream h, CUgraph* out, bool ptsz) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  CUctx_st* c = t_current;
  std::unique_ptr<GraphData> fresh;
  {
    Lock lk(g.mu);
    StreamP s;
    r = resolve_locked(h, ptsz, s);
    if (r == CUDA_SUCCESS) c = s->ctx.ctx;
    if (r == CUDA_SUCCESS && out == nullptr) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && (!s->capturing || s->cig)) r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        s->capture_thread != std::this_thread::get_id())
      r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (r == CUDA_SUCCESS) {
      CUgraph target = s->capture_target;
      if (s->capture != nullptr && s->capture->recapture) {
        // "If the recapture fails for any reason, the graph will be in an undefined state": a topology mismatch,
        // or fewer nodes captured than the graph has.
        GraphData& gd = *s->capture;
        if (gd.recapture_failed || gd.recapture_next != gd.nodes.size()) r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
      }
      fresh = std::move(s->capture_owned);
      end_capture_locked(*s);
      if (c->sticky.load(std::memory_order_acquire) != 0) {  // dead context: no new graph
        *out = target;
      } else if (target != nullptr) {  // captured into an existing graph: that graph
        *out = target;
      } else {
        *out = adopt_locked(&Sim::graphs, std::move(fresh));
      }
    }
  }
  fresh.reset();
  return finish_in(c, r);
}

// ---- graph nodes

CUgraphNode handle_of(const GraphNode* n) { return reinterpret_cast<CUgraphNode>(const_cast<GraphNode*>(n)); }
CUgraph handle_of(const GraphData* g) { return reinterpret_cast<CUgraph>(const_cast<GraphData*>(g)); }

// Takes `n` into `g` (its creation order) and into the live-node table; bodies are registered as graphs.
GraphNode* register_node_locked(GraphData& g, std::unique_ptr<GraphNode> n) {
  n->owner = &g;
  for (auto& b : n->bodies) {
    b->parent = n.get();
    S().bodies.emplace(handle_of(b.get()), b.get());
  }
  GraphNode* raw = n.get();
  S().nodes.emplace(handle_of(raw), raw);
  g.nodes.push_back(std::move(n));
  return raw;
}

// A graph going away (destroyed, or a body with its node): its nodes and bodies leave the tables.
void forget_graph_locked(GraphData& g) {
  for (auto& n : g.nodes) {
    for (auto& b : n->bodies) {
      forget_graph_locked(*b);
      S().bodies.erase(handle_of(b.get()));
    }
    S().nodes.erase(handle_of(n.get()));
  }
}

CUgraphNodeType type_of(const Item& it) {
  switch (it.kind) {
    case Item::Kernel: return CU_GRAPH_NODE_TYPE_KERNEL;
    case Item::Copy: return CU_GRAPH_NODE_TYPE_MEMCPY;
    case Item::Memset8:
    case Item::Memset32: return CU_GRAPH_NODE_TYPE_MEMSET;
    case Item::HostFn: return CU_GRAPH_NODE_TYPE_HOST;
    case Item::Write32:
    case Item::Write64: return CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
    default: return CU_GRAPH_NODE_TYPE_EMPTY;
  }
}

void set_kernel_ptrs(GraphNode& n) {
  for (int i = 0; i < 5; ++i) n.param_ptrs[i] = nullptr;
  if (n.item.k == nullptr) return;
  for (int i = 0; i < n.item.k->nparams; ++i) n.param_ptrs[i] = n.item.args + n.item.k->offsets[i];
}

}  // namespace sim

// Captured work becomes a node that depends on the previous captured node (the stream's order).
void sim::capture_item_locked(GraphData& g, Item&& it) {
  if (g.recapture) {
    // A recapture: the next node in creation order takes the work, if it is of the same type (the mismatch
    // callback is not called: every parameter change is taken).
    const CUgraphNodeType t = type_of(it);
    if (g.recapture_failed || g.recapture_next >= g.nodes.size() || g.nodes[g.recapture_next]->type != t) {
      g.recapture_failed = true;
      return;
    }
    GraphNode& n = *g.nodes[g.recapture_next++];
    n.item = std::move(it);
    if (n.type == CU_GRAPH_NODE_TYPE_KERNEL) set_kernel_ptrs(n);
    return;
  }
  auto n = std::make_unique<GraphNode>();
  n->type = type_of(it);
  n->item = std::move(it);
  if (g.capture_tail != nullptr)
    n->deps.push_back(g.capture_tail);
  else
    n->deps = std::move(g.capture_first_deps);
  if (n->type == CU_GRAPH_NODE_TYPE_KERNEL) set_kernel_ptrs(*n);
  g.capture_tail = register_node_locked(g, std::move(n));
}

namespace sim {

// A kernel node's parameters, checked as a launch checks them (CUDA_KERNEL_NODE_PARAMS_v1/v2/v3: `kern` is used
// only when `func` is NULL).
template <class P>
CUresult kernel_node_locked(const P& p, CUkernel kern, GraphNode& n) {
  CUfunction f = p.func != nullptr ? p.func : reinterpret_cast<CUfunction>(kern);
  if (f == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = nullptr;
  const KernelDesc* desc = launchable_locked(f, &name);
  if (desc == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  unsigned gx = p.gridDimX, gy = p.gridDimY, gz = p.gridDimZ, bx = p.blockDimX, by = p.blockDimY, bz = p.blockDimZ;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bx > 1024 || by > 1024 || bz > 64 || uint64_t{bx} * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
  if (p.kernelParams != nullptr && p.extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  Item it;
  it.kind = Item::Kernel;
  it.k = desc;
  it.func = p.func;
  it.name = name;
  it.grid[0] = gx, it.grid[1] = gy, it.grid[2] = gz, it.block[0] = bx, it.block[1] = by, it.block[2] = bz;
  it.shared = p.sharedMemBytes;
  CUresult r = pack_args(*desc, p.kernelParams, p.extra, it);
  if (r != CUDA_SUCCESS) return r;
  n.type = CU_GRAPH_NODE_TYPE_KERNEL;
  n.item = it;
  n.kern = p.func != nullptr ? nullptr : kern;
  set_kernel_ptrs(n);
  return CUDA_SUCCESS;
}

CUresult memset_node(const CUDA_MEMSET_NODE_PARAMS& p, GraphNode& n) {
  if (p.dst == 0 || p.width == 0) return CUDA_ERROR_INVALID_VALUE;
  if (p.height > 1) return CUDA_ERROR_NOT_SUPPORTED;  // the sim: 1-D memsets only
  if (p.elementSize != 1 && p.elementSize != 4) return p.elementSize == 2 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  n.type = CU_GRAPH_NODE_TYPE_MEMSET;
  n.item = Item{};
  n.item.kind = p.elementSize == 4 ? Item::Memset32 : Item::Memset8;
  n.item.dst = reinterpret_cast<void*>(static_cast<uintptr_t>(p.dst));
  n.item.value = p.value;
  n.item.n = p.width;
  return CUDA_SUCCESS;
}

const void* memcpy_end(CUmemorytype t, const void* host, CUdeviceptr dev) {
  return t == CU_MEMORYTYPE_HOST ? host : reinterpret_cast<const void*>(static_cast<uintptr_t>(dev));
}

CUresult memcpy_node(const CUDA_MEMCPY3D& p, GraphNode& n) {
  if (p.WidthInBytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (p.Height > 1 || p.Depth > 1) return CUDA_ERROR_NOT_SUPPORTED;  // the sim: 1-D copies only
  if (p.srcMemoryType == CU_MEMORYTYPE_ARRAY || p.dstMemoryType == CU_MEMORYTYPE_ARRAY) return CUDA_ERROR_NOT_SUPPORTED;
  const void* src = memcpy_end(p.srcMemoryType, p.srcHost, p.srcDevice);
  void* dst = const_cast<void*>(memcpy_end(p.dstMemoryType, p.dstHost, p.dstDevice));
  if (src == nullptr || dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  n.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  n.item = Item{};
  n.item.kind = Item::Copy;
  n.item.src = static_cast<const char*>(src) + p.srcXInBytes;
  n.item.dst = static_cast<char*>(dst) + p.dstXInBytes;
  n.item.n = p.WidthInBytes;
  return CUDA_SUCCESS;
}

CUresult host_node(CUhostFn fn, void* user, GraphNode& n) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  n.type = CU_GRAPH_NODE_TYPE_HOST;
  n.item = Item{};
  n.item.kind = Item::HostFn;
  n.item.fn = fn;
  n.item.dst = user;
  return CUDA_SUCCESS;
}

std::unique_ptr<GraphData> clone_graph_locked(const GraphData& src);

// A deep copy of `src`'s nodes (bodies too), its edges remapped; each copy remembers its original.
std::unique_ptr<GraphData> clone_graph_locked(const GraphData& src) {
  auto out = std::make_unique<GraphData>();
  out->captured_to_graph = src.captured_to_graph;
  std::unordered_map<const GraphNode*, GraphNode*> copy_of;
  for (const auto& n : src.nodes) {
    auto c = std::make_unique<GraphNode>();
    c->type = n->type;
    c->item = n->item;
    c->cond = n->cond;
    c->cond_type = n->cond_type;
    c->device_updatable = n->device_updatable;
    c->kern = n->kern;
    c->cloned_from = n.get();
    for (const GraphNode* d : n->deps) c->deps.push_back(copy_of.at(d));
    for (const auto& b : n->bodies) c->bodies.push_back(clone_graph_locked(*b));
    if (c->type == CU_GRAPH_NODE_TYPE_KERNEL) set_kernel_ptrs(*c);
    copy_of[n.get()] = c.get();
    GraphNode* raw = register_node_locked(*out, std::move(c));
    if (!raw->bodies.empty() && raw->type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
      for (auto& b : raw->bodies) raw->body_handles.push_back(handle_of(b.get()));
  }
  if (src.capture_tail != nullptr) out->capture_tail = copy_of.at(src.capture_tail);
  return out;
}

// `g`'s nodes in dependency order: of the nodes whose dependencies are all placed, the first created goes next.
std::vector<const GraphNode*> dependency_order(const GraphData& g) {
  std::vector<const GraphNode*> out;
  std::unordered_set<const GraphNode*> placed;
  out.reserve(g.nodes.size());
  while (out.size() < g.nodes.size()) {
    bool progress = false;
    for (const auto& n : g.nodes) {
      if (placed.count(n.get())) continue;
      bool ready = true;
      for (const GraphNode* d : n->deps) ready &= placed.count(d) != 0;
      if (!ready) continue;
      placed.insert(n.get());
      out.push_back(n.get());
      progress = true;
      break;
    }
    if (!progress) break;  // a cycle cannot be built through the API
  }
  return out;
}

// The nodes an exec runs, flattened: child graphs inlined; a conditional node runs the body its handle's value
// selects (the sim: the handle's default value, applied at each launch; no kernel of the sim sets a condition, so a
// WHILE body whose default is non-zero runs once).
void flatten_locked(const GraphData& g, const GraphNode* top, std::vector<ExecNode>& out) {
  for (const GraphNode* n : dependency_order(g)) {
    const GraphNode* t = top != nullptr ? top : n;
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
      if (!n->bodies.empty()) flatten_locked(*n->bodies[0], t, out);
      continue;
    }
    if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      auto it = S().conds.find(n->cond);
      unsigned v = it != S().conds.end() && (it->second.flags & CU_GRAPH_COND_ASSIGN_DEFAULT) ? it->second.default_value : 0;
      size_t body = SIZE_MAX;
      if (n->cond_type == CU_GRAPH_COND_TYPE_SWITCH)
        body = v;
      else if (v != 0)
        body = 0;
      else if (n->cond_type == CU_GRAPH_COND_TYPE_IF && n->bodies.size() == 2)
        body = 1;
      if (body < n->bodies.size()) flatten_locked(*n->bodies[body], t, out);
      continue;
    }
    if (n->type == CU_GRAPH_NODE_TYPE_EMPTY) continue;
    ExecNode e;
    e.origin = n;
    e.top = t;
    e.item = n->item;
    e.type = n->type;
    out.push_back(std::move(e));
  }
}

// Runs in the stream's context and answers its state (as a kernel launch does).
CUresult graph_launch(CUgraphExec x, CUstream h, bool ptsz) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (t_current == nullptr) {
    CUresult e = enter();
    return e != CUDA_SUCCESS ? e : CUDA_ERROR_INVALID_CONTEXT;
  }
  return on_stream(h, ptsz, true, [&](const StreamP& s) -> CUresult {
    const GraphExec* e = find_locked(&Sim::execs, x);
    if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    // The items are copied as they are now: a later change of the exec affects later launches only.
    for (const ExecNode& node : e->nodes) {
      if (!node.enabled) continue;
      Item copy = node.item;
      if (CUresult r = submit_locked(*s, std::move(copy)); r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  });
}

bool holds_memop(const GraphData& g) {
  for (const auto& n : g.nodes) {
    if (n->item.kind == Item::Write32 || n->item.kind == Item::Write64) return true;
    for (const auto& b : n->bodies)
      if (holds_memop(*b)) return true;
  }
  return false;
}

CUresult graph_instantiate(CUgraphExec* out, CUgraph graph) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  const GraphData* gd = find_locked(&Sim::graphs, graph);
  if (gd == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // As the real driver treats a conditional node's body: no memory-operation nodes.
  if (gd->captured_to_graph && holds_memop(*gd)) return CUDA_ERROR_NOT_SUPPORTED;
  for (const auto& n : gd->nodes)
    for (const auto& b : n->bodies)
      if (n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && holds_memop(*b)) return CUDA_ERROR_NOT_SUPPORTED;
  auto e = std::make_unique<GraphExec>();
  e->ctx = CtxRef::of(t_current);
  flatten_locked(*gd, nullptr, e->nodes);
  *out = adopt_locked(&Sim::execs, std::move(e));
  return CUDA_SUCCESS;
}

// The graph-building calls' common start: initialised, a live graph, dependencies that are nodes of it.
CUresult add_node_locked(CUgraphNode* out, CUgraph h, const CUgraphNode* deps, size_t ndeps, GraphData** g,
                         std::vector<GraphNode*>* dep_nodes) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *g = graph_locked(h);
  if (*g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ndeps != 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; ++i) {
    GraphNode* d = node_locked(deps[i]);
    if (d == nullptr || d->owner != *g) return CUDA_ERROR_INVALID_VALUE;
    dep_nodes->push_back(d);
  }
  return CUDA_SUCCESS;
}

// cuGraphAdd*Node: `fill(node)` sets the node's kind and work (or refuses); then it joins the graph.
template <class Fill>
CUresult add_node(CUgraphNode* out, CUgraph h, const CUgraphNode* deps, size_t ndeps, Fill fill) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Lock lk(S().mu);
  GraphData* g = nullptr;
  std::vector<GraphNode*> dep_nodes;
  if ((r = add_node_locked(out, h, deps, ndeps, &g, &dep_nodes)) != CUDA_SUCCESS) return r;
  auto n = std::make_unique<GraphNode>();
  n->deps = std::move(dep_nodes);
  if ((r = fill(*n)) != CUDA_SUCCESS) return r;
  GraphNode* raw = register_node_locked(*g, std::move(n));
  for (auto& b : raw->bodies)
    if (raw->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) raw->body_handles.push_back(handle_of(b.get()));
  *out = handle_of(raw);
  return CUDA_SUCCESS;
}

// cuGraphAddNode / cuGraphNodeSetParams / cuGraphExecNodeSetParams: one CUgraphNodeParams into a node.
CUresult node_from_params_locked(CUgraphNodeParams* p, GraphNode& n, bool creating) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return kernel_node_locked(p->kernel, p->kernel.kern, n);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      CUDA_MEMSET_NODE_PARAMS m{p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                p->memset.width, p->memset.height};
      return memset_node(m, n);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p->memcpy.flags != 0 || p->memcpy.reserved != 0) return CUDA_ERROR_INVALID_VALUE;
      return memcpy_node(p->memcpy.copyParams, n);
    case CU_GRAPH_NODE_TYPE_HOST:
      return host_node(p->host.fn, p->host.userData, n);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      n.type = CU_GRAPH_NODE_TYPE_EMPTY;
      return CUDA_SUCCESS;
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      if (!creating) return CUDA_ERROR_NOT_SUPPORTED;
      const GraphData* child = graph_locked(p->graph.graph);
      if (child == nullptr) return CUDA_ERROR_INVALID_VALUE;
      if (p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) {
        // The child graph itself becomes the node's body (cuda.h: "owned by the parent and will be destroyed when
        // the parent is destroyed"): its handle now names the body, so nodes added through it are the node's; it
        // cannot be destroyed, instantiated or moved again on its own (it is no longer among the graphs).
        auto it = S().graphs.find(p->graph.graph);
        if (it == S().graphs.end()) return CUDA_ERROR_INVALID_VALUE;  // a body already
        n.type = CU_GRAPH_NODE_TYPE_GRAPH;
        n.bodies.push_back(std::move(it->second));
        S().graphs.erase(it);
        return CUDA_SUCCESS;
      }
      if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) return CUDA_ERROR_NOT_SUPPORTED;
      n.type = CU_GRAPH_NODE_TYPE_GRAPH;
      n.bodies.push_back(clone_graph_locked(*child));
      return CUDA_SUCCESS;
    }
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
      if (!creating) return CUDA_ERROR_INVALID_VALUE;
      const CUDA_CONDITIONAL_NODE_PARAMS& c = p->conditional;
      if (S().conds.count(c.handle) == 0) return CUDA_ERROR_INVALID_VALUE;
      bool size_ok = c.type == CU_GRAPH_COND_TYPE_IF     ? (c.size == 1 || c.size == 2)
                     : c.type == CU_GRAPH_COND_TYPE_WHILE ? c.size == 1
                     : c.type == CU_GRAPH_COND_TYPE_SWITCH ? c.size >= 1 && c.size <= 1024
                                                           : false;
      if (!size_ok) return CUDA_ERROR_INVALID_VALUE;
      n.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
      n.cond = c.handle;
      n.cond_type = c.type;
      for (unsigned i = 0; i < c.size; ++i) n.bodies.push_back(std::make_unique<GraphData>());
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;  // event, semaphore, allocation, memop nodes: not simulated
  }
}

// After cuGraphAddNode made a conditional node: the driver hands back its bodies in phGraph_out.
void publish_bodies(CUgraphNodeParams* p, CUgraphNode h) {
  if (p == nullptr || p->type != CU_GRAPH_NODE_TYPE_CONDITIONAL) return;
  Lock lk(S().mu);
  GraphNode* n = node_locked(h);
  if (n != nullptr) p->conditional.phGraph_out = n->body_handles.data();
}

// An existing node's parameters replaced (cuGraph*NodeSetParams): same kind only.
template <class Fill>
CUresult set_node_params(CUgraphNode h, CUgraphNodeType want, Fill fill) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Lock lk(S().mu);
  GraphNode* n = node_locked(h);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (want != n->type) return CUDA_ERROR_INVALID_VALUE;
  GraphNode fresh;
  if ((r = fill(fresh)) != CUDA_SUCCESS) return r;
  if (fresh.type != n->type) return CUDA_ERROR_INVALID_VALUE;
  n->item = fresh.item;
  n->kern = fresh.kern;
  if (n->type == CU_GRAPH_NODE_TYPE_KERNEL) set_kernel_ptrs(*n);
  return CUDA_SUCCESS;
}

// The exec's nodes made from `h`: its own node, or (after cuGraphExecUpdate) the update graph's node paired with it.
std::vector<ExecNode*> exec_nodes_locked(GraphExec& e, CUgraphNode h) {
  std::vector<ExecNode*> out;
  const GraphNode* n = node_locked(h);
  if (n == nullptr) return out;
  for (auto& x : e.nodes)
    if (x.origin == n || x.alias == n) out.push_back(&x);
  return out;
}

// cuGraphExec*SetParams: the exec's copy of one node takes new work (later launches run it).
template <class Fill>
CUresult exec_set_params(CUgraphExec x, CUgraphNode h, Fill fill) {
  CUresult r = enter_exec(x);
  if (r != CUDA_SUCCESS) return r;
  Lock lk(S().mu);
  GraphExec* e = find_locked(&Sim::execs, x);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<ExecNode*> targets = exec_nodes_locked(*e, h);
  if (targets.empty()) return CUDA_ERROR_INVALID_VALUE;
  GraphNode fresh;
  if ((r = fill(fresh)) != CUDA_SUCCESS) return r;
  for (ExecNode* t : targets) {
    if (t->type != fresh.type) return CUDA_ERROR_INVALID_VALUE;  // a node's type never changes
  }
  for (ExecNode* t : targets) t->item = fresh.item;
  return CUDA_SUCCESS;
}

CUresult exec_child_set_params(CUgraphExec x, CUgraphNode h, CUgraph child) {
  CUresult r = enter_exec(x);
  if (r != CUDA_SUCCESS) return r;
  Lock lk(S().mu);
  GraphExec* e = find_locked(&Sim::execs, x);
  const GraphNode* n = node_locked(h);
  const GraphData* c = graph_locked(child);
  if (e == nullptr || n == nullptr || c == nullptr || n->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  std::vector<ExecNode*> old;
  for (auto& x : e->nodes)
    if (x.top == n || x.top_alias == n) old.push_back(&x);
  std::vector<ExecNode> fresh;
  flatten_locked(*c, n, fresh);
  // The child's topology must match the one the exec holds (cuda.h); the sim compares the flattened kinds.
  if (fresh.size() != old.size()) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < old.size(); ++i)
    if (fresh[i].type != old[i]->type) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < old.size(); ++i) old[i]->item = fresh[i].item;
  return CUDA_SUCCESS;
}

// cuGraphExecUpdate: `graph` must have the exec's topology (the sim compares the flattened nodes' kinds, in
// dependency order, and pairs them by that order); the exec then runs `graph`'s work.
CUresult exec_update(CUgraphExec x, CUgraph graph, CUgraphExecUpdateResult* result, CUgraphNode* error_node) {
  CUresult r = enter_exec(x);
  if (r != CUDA_SUCCESS) return r;
  if (result != nullptr) *result = CU_GRAPH_EXEC_UPDATE_ERROR;
  if (error_node != nullptr) *error_node = nullptr;
  Lock lk(S().mu);
  GraphExec* e = find_locked(&Sim::execs, x);
  const GraphData* g = find_locked(&Sim::graphs, graph);
  if (e == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<ExecNode> fresh;
  flatten_locked(*g, nullptr, fresh);
  if (fresh.size() != e->nodes.size()) {
    if (result != nullptr) *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (size_t i = 0; i < fresh.size(); ++i)
    if (fresh[i].type != e->nodes[i].type) {
      if (result != nullptr) *result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
      if (error_node != nullptr) *error_node = handle_of(fresh[i].origin);
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
  for (size_t i = 0; i < fresh.size(); ++i) {
    ExecNode& t = e->nodes[i];
    t.item = fresh[i].item;
    t.alias = fresh[i].origin;
    t.top_alias = fresh[i].top;
  }
  if (result != nullptr) *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

template <class P>
void kernel_params_out(const GraphNode& n, P* out) {
  out->func = n.item.func;
  out->gridDimX = n.item.grid[0], out->gridDimY = n.item.grid[1], out->gridDimZ = n.item.grid[2];
  out->blockDimX = n.item.block[0], out->blockDimY = n.item.block[1], out->blockDimZ = n.item.block[2];
  out->sharedMemBytes = n.item.shared;
  out->kernelParams = const_cast<void**>(n.param_ptrs);
  out->extra = nullptr;
}

template <class P>
CUresult kernel_node_get_params(CUgraphNode h, P* out) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  const GraphNode* n = node_locked(h);
  if (n == nullptr || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  kernel_params_out(*n, out);
  if constexpr (requires { out->kern; }) {
    out->kern = n->kern;
    out->ctx = nullptr;
  }
  return CUDA_SUCCESS;
}

}  // namespace sim

using namespace sim;

SIM_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture(hStream, mode, false);
}
SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  return begin_capture(hStream, mode, true);
}
SIM_API CUresult cuStreamBeginCapture(CUstream hStream) {
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
SIM_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

// cuStreamBeginRecaptureToGraph: into the graph's own nodes, in creation order (sim_internal.h GraphData::recapture).
CUresult begin_recapture(CUstream h, CUstreamCaptureMode mode, bool ptsz, CUgraph target) {
  return begin_capture_to_graph(h, mode, ptsz, target, nullptr, 0, CaptureKind::Recapture);
}

SIM_API CUresult cuStreamBeginRecaptureToGraph(CUstream hStream, CUstreamCaptureMode mode, CUgraph hGraph,
                                               CUgraphRecaptureCallback, void*) {
  return begin_recapture(hStream, mode, false, hGraph);
}
SIM_API CUresult cuStreamBeginRecaptureToGraph_ptsz(CUstream hStream, CUstreamCaptureMode mode, CUgraph hGraph,
                                                    CUgraphRecaptureCallback, void*) {
  return begin_recapture(hStream, mode, true, hGraph);
}

SIM_API CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                             const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode) {
  return begin_capture_to_graph(hStream, mode, false, hGraph, dependencies, numDependencies);
}
SIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                                  const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode) {
  return begin_capture_to_graph(hStream, mode, true, hGraph, dependencies, numDependencies);
}

SIM_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) { return end_capture(hStream, phGraph, false); }

// CIG capture (13.1): as a relaxed capture whose work goes into the graphics client's command list (the sim keeps it
// in a graph it drops at the end and never runs). Assumed, not copied: any context may begin one (a real driver
// wants a CIG context, cuCtxCreate_v4); the shared data is not looked at.
CUresult begin_cig(CUstream h, const CUstreamCigCaptureParams* p, bool ptsz) {
  if (p == nullptr || p->streamCigParams == nullptr) {
    CUresult r = enter_stream(h, ptsz);
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
  }
  return begin_capture(h, CU_STREAM_CAPTURE_MODE_RELAXED, ptsz, nullptr, nullptr, 0, CaptureKind::Cig);
}

CUresult end_cig(CUstream h, bool ptsz) {
  CUresult r = enter_stream(h, ptsz);
  if (r != CUDA_SUCCESS) return r;
  Lock lk(S().mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  if (!s->capturing || !s->cig) return CUDA_ERROR_INVALID_VALUE;
  end_capture_locked(*s);
  return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamBeginCaptureToCig(CUstream hStream, CUstreamCigCaptureParams* p) {
  return begin_cig(hStream, p, false);
}
SIM_API CUresult cuStreamBeginCaptureToCig_ptsz(CUstream hStream, CUstreamCigCaptureParams* p) {
  return begin_cig(hStream, p, true);
}
SIM_API CUresult cuStreamEndCaptureToCig(CUstream hStream) { return end_cig(hStream, false); }
SIM_API CUresult cuStreamEndCaptureToCig_ptsz(CUstream hStream) { return end_cig(hStream, true); }
SIM_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return end_capture(hStream, phGraph, true);
}

// ---- graphs

SIM_API CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return create_handle(&Sim::graphs, phGraph);
}

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  return graph_instantiate(phGraphExec, hGraph);
}

namespace {
CUresult graph_instantiate_legacy(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                                  size_t bufferSize) {
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return graph_instantiate(phGraphExec, hGraph);
}
}  // namespace

SIM_API CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode, char* logBuffer,
                                    size_t bufferSize) {
  return graph_instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                       char* logBuffer, size_t bufferSize) {
  return graph_instantiate_legacy(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

SIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_launch(hGraphExec, hStream, false);
}
SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return graph_launch(hGraphExec, hStream, true);
}

SIM_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) { return destroy_handle(&Sim::execs, hGraphExec); }

SIM_API CUresult cuGraphDestroy(CUgraph hGraph) {
  return destroy_handle(
      &Sim::graphs, hGraph, [](Sim&, GraphData& g) { forget_graph_locked(g); },
      [](Sim&, CUgraph h) {
        // a stream still capturing into it keeps it
        return graph_in_capture_locked(h) ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
      });
}

// ---- graphs built node by node

SIM_API CUresult cuGraphAddKernelNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](GraphNode& n) {
    return nodeParams == nullptr ? CUDA_ERROR_INVALID_VALUE : kernel_node_locked(*nodeParams, nullptr, n);
  });
}
SIM_API CUresult cuGraphAddKernelNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](GraphNode& n) {
    return nodeParams == nullptr ? CUDA_ERROR_INVALID_VALUE : kernel_node_locked(*nodeParams, nodeParams->kern, n);
  });
}

SIM_API CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                size_t numDependencies, CUgraphNodeParams* nodeParams) {
  CUresult r = add_node(phGraphNode, hGraph, dependencies, numDependencies,
                        [&](GraphNode& n) { return node_from_params_locked(nodeParams, n, true); });
  if (r == CUDA_SUCCESS) publish_bodies(nodeParams, *phGraphNode);
  return r;
}
SIM_API CUresult cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                   const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                   CUgraphNodeParams* nodeParams) {
  // Edge data (programmatic edges) is accepted; the sim runs every edge as a full dependency.
  return cuGraphAddNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

SIM_API CUresult cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                     size_t numDependencies) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [](GraphNode& n) {
    n.type = CU_GRAPH_NODE_TYPE_EMPTY;
    return CUDA_SUCCESS;
  });
}
SIM_API CUresult cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS* memsetParams,
                                      CUcontext ctx) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](GraphNode& n) {
    return memsetParams == nullptr ? CUDA_ERROR_INVALID_VALUE : memset_node(*memsetParams, n);
  });
}
SIM_API CUresult cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                      size_t numDependencies, const CUDA_MEMCPY3D* copyParams, CUcontext ctx) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](GraphNode& n) {
    return copyParams == nullptr ? CUDA_ERROR_INVALID_VALUE : memcpy_node(*copyParams, n);
  });
}
SIM_API CUresult cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                    size_t numDependencies, const CUDA_HOST_NODE_PARAMS* nodeParams) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](GraphNode& n) {
    return nodeParams == nullptr ? CUDA_ERROR_INVALID_VALUE : host_node(nodeParams->fn, nodeParams->userData, n);
  });
}
SIM_API CUresult cuGraphAddChildGraphNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                          size_t numDependencies, CUgraph childGraph) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, [&](GraphNode& n) {
    const GraphData* child = graph_locked(childGraph);
    if (child == nullptr || child == graph_locked(hGraph)) return CUDA_ERROR_INVALID_VALUE;
    n.type = CU_GRAPH_NODE_TYPE_GRAPH;
    n.bodies.push_back(clone_graph_locked(*child));  // the node holds a copy of the child (cuda.h)
    return CUDA_SUCCESS;
  });
}
// cuGraphAddDependencies / cuGraphRemoveDependencies: to[i] depends on from[i], both nodes of hGraph. Adding an
// edge that exists or removing one that does not: CUDA_ERROR_INVALID_VALUE (cuda.h); an edge that would close a
// cycle: refused the same way (the sim's choice: cuda.h does not say when the driver notices). Nothing changes
// unless every edge is accepted. An exec made before keeps its order.
CUresult change_edges(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to, size_t n, bool add) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  Lock lk(S().mu);
  GraphData* g = graph_locked(hGraph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (n == 0) return CUDA_SUCCESS;
  if (from == nullptr || to == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::pair<GraphNode*, GraphNode*>> edges;
  for (size_t i = 0; i < n; ++i) {
    GraphNode* f = node_locked(from[i]);
    GraphNode* t = node_locked(to[i]);
    if (f == nullptr || t == nullptr || f->owner != g || t->owner != g || f == t) return CUDA_ERROR_INVALID_VALUE;
    bool has = std::find(t->deps.begin(), t->deps.end(), f) != t->deps.end();
    for (const auto& e : edges) has |= e.first == f && e.second == t;  // the same edge twice in one call
    if (has == add) return CUDA_ERROR_INVALID_VALUE;
    edges.emplace_back(f, t);
  }
  for (auto& [f, t] : edges) {
    if (add)
      t->deps.push_back(f);
    else
      std::erase(t->deps, f);
  }
  if (add && dependency_order(*g).size() != g->nodes.size()) {  // a cycle: undone
    for (auto& [f, t] : edges) std::erase(t->deps, f);
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                        size_t numDependencies) {
  return change_edges(hGraph, from, to, numDependencies, true);
}
SIM_API CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                           const CUgraphEdgeData* edgeData, size_t numDependencies) {
  (void)edgeData;  // accepted; every edge is a full dependency in the sim
  return change_edges(hGraph, from, to, numDependencies, true);
}
SIM_API CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                           size_t numDependencies) {
  return change_edges(hGraph, from, to, numDependencies, false);
}
SIM_API CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                              const CUgraphEdgeData* edgeData, size_t numDependencies) {
  (void)edgeData;
  return change_edges(hGraph, from, to, numDependencies, false);
}

SIM_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph* phGraph) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  const GraphNode* n = node_locked(hNode);
  if (n == nullptr || n->type != CU_GRAPH_NODE_TYPE_GRAPH || n->bodies.empty()) return CUDA_ERROR_INVALID_VALUE;
  *phGraph = handle_of(n->bodies[0].get());
  return CUDA_SUCCESS;
}

// cuGraphNodeGetParams (CUDA 13.2; cuGetProcAddress gives it from 13020): the node's kind and, for the kinds the sim
// describes, its parameters: kernel nodes (as cuGraphKernelNodeGetParams_v2, in the v3 struct), child graph nodes (the
// node's own graph, as cuGraphChildGraphNodeGetGraph, ownership CLONE) and conditional nodes (handle, type, size, and
// phGraph_out: the node's body graphs, "driver-owned memory associated with the node" as cuda.h says, so a clone's
// bodies are reachable through its nodes). Other kinds: the type alone, every other field zero.
SIM_API CUresult cuGraphNodeGetParams(CUgraphNode hNode, CUgraphNodeParams* nodeParams) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  GraphNode* n = node_locked(hNode);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *nodeParams = CUgraphNodeParams{};
  nodeParams->type = n->type;
  switch (n->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      kernel_params_out(*n, &nodeParams->kernel);
      nodeParams->kernel.kern = n->kern;
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      if (!n->bodies.empty()) nodeParams->graph.graph = handle_of(n->bodies[0].get());
      break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      nodeParams->conditional.handle = n->cond;
      nodeParams->conditional.type = n->cond_type;
      nodeParams->conditional.size = static_cast<unsigned>(n->body_handles.size());
      nodeParams->conditional.phGraph_out = n->body_handles.data();
      break;
    default:
      break;
  }
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* pHandle_out, CUgraph hGraph, CUcontext ctx,
                                                unsigned int defaultLaunchValue, unsigned int flags) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (pHandle_out == nullptr || (flags & ~static_cast<unsigned>(CU_GRAPH_COND_ASSIGN_DEFAULT)))
    return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  if (graph_locked(hGraph) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUgraphConditionalHandle h = S().next_cond++;
  S().conds[h] = CondHandle{defaultLaunchValue, flags};
  *pHandle_out = h;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return kernel_node_get_params(hNode, nodeParams);
}
SIM_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  return kernel_node_get_params(hNode, nodeParams);
}
SIM_API CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return set_node_params(hNode, CU_GRAPH_NODE_TYPE_KERNEL, [&](GraphNode& n) {
    return nodeParams == nullptr ? CUDA_ERROR_INVALID_VALUE : kernel_node_locked(*nodeParams, nullptr, n);
  });
}
SIM_API CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  return set_node_params(hNode, CU_GRAPH_NODE_TYPE_KERNEL, [&](GraphNode& n) {
    return nodeParams == nullptr ? CUDA_ERROR_INVALID_VALUE : kernel_node_locked(*nodeParams, nodeParams->kern, n);
  });
}
SIM_API CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams* nodeParams) {
  if (nodeParams == nullptr) {
    CUresult r = enter();
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
  }
  return set_node_params(hNode, nodeParams->type,
                         [&](GraphNode& n) { return node_from_params_locked(nodeParams, n, false); });
}

SIM_API CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               const CUkernelNodeAttrValue* value) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  GraphNode* n = node_locked(hNode);
  if (n == nullptr || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_KERNEL_NODE_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE) {
    int v = value->deviceUpdatableKernelNode.deviceUpdatable;
    if (v != 0 && v != 1) return CUDA_ERROR_INVALID_VALUE;
    n->device_updatable = v == 1;
  }
  return CUDA_SUCCESS;  // other attributes: accepted, no effect in the sim
}

SIM_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return exec_set_params(hGraphExec, hNode, [&](GraphNode& n) {
    return nodeParams == nullptr ? CUDA_ERROR_INVALID_VALUE : kernel_node_locked(*nodeParams, nullptr, n);
  });
}
SIM_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  return exec_set_params(hGraphExec, hNode, [&](GraphNode& n) {
    return nodeParams == nullptr ? CUDA_ERROR_INVALID_VALUE : kernel_node_locked(*nodeParams, nodeParams->kern, n);
  });
}
SIM_API CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams* nodeParams) {
  if (nodeParams != nullptr && nodeParams->type == CU_GRAPH_NODE_TYPE_GRAPH)
    return exec_child_set_params(hGraphExec, hNode, nodeParams->graph.graph);
  return exec_set_params(hGraphExec, hNode,
                         [&](GraphNode& n) { return node_from_params_locked(nodeParams, n, false); });
}
SIM_API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph) {
  return exec_child_set_params(hGraphExec, hNode, childGraph);
}

SIM_API CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled) {
  CUresult r = enter_exec(hGraphExec);
  if (r != CUDA_SUCCESS) return r;
  Lock lk(S().mu);
  GraphExec* e = find_locked(&Sim::execs, hGraphExec);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<ExecNode*> targets = exec_nodes_locked(*e, hNode);
  if (targets.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (ExecNode* t : targets)  // kernel, memset and memcpy nodes only (cuda.h)
    if (t->type != CU_GRAPH_NODE_TYPE_KERNEL && t->type != CU_GRAPH_NODE_TYPE_MEMSET &&
        t->type != CU_GRAPH_NODE_TYPE_MEMCPY)
      return CUDA_ERROR_INVALID_VALUE;
  for (ExecNode* t : targets) t->enabled = isEnabled != 0;
  return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode* hErrorNode_out,
                                   CUgraphExecUpdateResult* updateResult_out) {
  return exec_update(hGraphExec, hGraph, updateResult_out, hErrorNode_out);
}
SIM_API CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo* resultInfo) {
  if (resultInfo != nullptr) {
    resultInfo->errorNode = nullptr;
    resultInfo->errorFromNode = nullptr;
  }
  return exec_update(hGraphExec, hGraph, resultInfo ? &resultInfo->result : nullptr,
                     resultInfo ? &resultInfo->errorNode : nullptr);
}

SIM_API CUresult cuGraphClone(CUgraph* phGraphClone, CUgraph originalGraph) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (phGraphClone == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  const GraphData* g = graph_locked(originalGraph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phGraphClone = adopt_locked(&Sim::graphs, clone_graph_locked(*g));
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphNodeFindInClone(CUgraphNode* phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (phNode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  const GraphData* g = graph_locked(hClonedGraph);
  const GraphNode* orig = node_locked(hOriginalNode);
  if (g == nullptr || orig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& n : g->nodes)
    if (n->cloned_from == orig) {
      *phNode = handle_of(n.get());
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}
SIM_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  const GraphNode* n = node_locked(hNode);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = n->type;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  const GraphData* g = graph_locked(hGraph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes == nullptr) {
    *numNodes = g->nodes.size();
    return CUDA_SUCCESS;
  }
  size_t n = std::min(*numNodes, g->nodes.size());
  for (size_t i = 0; i < *numNodes; ++i) nodes[i] = i < n ? handle_of(g->nodes[i].get()) : nullptr;
  *numNodes = n;
  return CUDA_SUCCESS;
}
SIM_API CUresult cuGraphDestroyNode(CUgraphNode hNode) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  std::unique_ptr<GraphNode> victim;
  {
    Lock lk(S().mu);
    GraphNode* n = node_locked(hNode);
    if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
    GraphData& g = *n->owner;
    for (auto& o : g.nodes) std::erase(o->deps, n);
    if (g.capture_tail == n) g.capture_tail = nullptr;
    for (auto& b : n->bodies) {
      forget_graph_locked(*b);
      S().bodies.erase(handle_of(b.get()));
    }
    S().nodes.erase(hNode);
    auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [n](const auto& p) { return p.get() == n; });
    victim = std::move(*it);
    g.nodes.erase(it);
  }
  return CUDA_SUCCESS;
}
