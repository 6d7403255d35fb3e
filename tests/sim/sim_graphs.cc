// cdsa simulated CUDA driver (tests only): stream capture (also into an existing graph) and graphs.
// See README.md for the contract and sim_internal.h for the shared state.

#include "sim_internal.h"

namespace sim {

bool valid_mode(CUstreamCaptureMode mode) {
  return mode == CU_STREAM_CAPTURE_MODE_GLOBAL || mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         mode == CU_STREAM_CAPTURE_MODE_RELAXED;
}

// Starts capture into `target` (an existing graph), or into a new graph when null.
CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptsz, CUgraph target = nullptr,
                       size_t num_dependencies = 0) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (!valid_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
  Sim& g = S();
  Lock lk(g.mu);
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  GraphData* into = nullptr;
  if (target != nullptr) {
    into = find_locked(&Sim::graphs, target);
    if (into == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (num_dependencies != 0) return CUDA_ERROR_INVALID_VALUE;  // the sim's graphs hand out no node handles
  }
  if (s->kind == Stream::Legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  s->capturing = true;
  s->capture_mode = mode;
  s->capture_thread = std::this_thread::get_id();
  s->capture_target = target;
  if (into != nullptr) {
    into->captured_to_graph = true;
    s->capture = into;
  } else {
    s->capture_owned = std::make_unique<GraphData>();
    s->capture = s->capture_owned.get();
  }
  ++g.capturing;
  return CUDA_SUCCESS;
}

// cuStreamBeginCaptureToGraph: a graph is required.
CUresult begin_capture_to_graph(CUstream h, CUstreamCaptureMode mode, bool ptsz, CUgraph target,
                                size_t num_dependencies) {
  if (target == nullptr) {
    CUresult r = enter();
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
  }
  return begin_capture(h, mode, ptsz, target, num_dependencies);
}

void end_capture_locked(Stream& s) {
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
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  Sim& g = S();
  CUresult r = CUDA_SUCCESS;
  std::unique_ptr<GraphData> fresh;
  {
    Lock lk(g.mu);
    StreamP s;
    r = resolve_locked(h, ptsz, s);
    if (r == CUDA_SUCCESS && out == nullptr) r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && !s->capturing) r = CUDA_ERROR_ILLEGAL_STATE;
    if (r == CUDA_SUCCESS && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
        s->capture_thread != std::this_thread::get_id())
      r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (r == CUDA_SUCCESS) {
      CUgraph target = s->capture_target;
      fresh = std::move(s->capture_owned);
      end_capture_locked(*s);
      if (g.sticky.load(std::memory_order_acquire) != 0) {  // dead context: no new graph
        *out = target;
      } else if (target != nullptr) {  // captured into an existing graph: that graph
        *out = target;
      } else {
        *out = adopt_locked(&Sim::graphs, std::move(fresh));
      }
    }
  }
  fresh.reset();
  return finish(r);
}

CUresult graph_launch(CUgraphExec x, CUstream h, bool ptsz) {
  CUresult r = enter_ctx();
  if (r != CUDA_SUCCESS) return r;
  Lock lk(S().mu);
  const GraphExec* e = find_locked(&Sim::execs, x);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  StreamP s;
  if ((r = resolve_locked(h, ptsz, s)) != CUDA_SUCCESS) return r;
  for (const Item& node : e->nodes) {
    Item copy = node;
    if ((r = submit_locked(*s, std::move(copy))) != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult graph_instantiate(CUgraphExec* out, CUgraph graph) {
  CUresult r = enter();
  if (r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Lock lk(S().mu);
  const GraphData* gd = find_locked(&Sim::graphs, graph);
  if (gd == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gd->captured_to_graph) {
    // As the real driver treats a conditional node's body: no memory-operation nodes.
    for (const Item& node : gd->nodes)
      if (node.kind == Item::Write32 || node.kind == Item::Write64) return CUDA_ERROR_NOT_SUPPORTED;
  }
  *out = adopt_locked(&Sim::execs, std::make_unique<GraphExec>(GraphExec{gd->nodes}));
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

SIM_API CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                             const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode) {
  return begin_capture_to_graph(hStream, mode, false, hGraph, numDependencies);
}
SIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                                  const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode) {
  return begin_capture_to_graph(hStream, mode, true, hGraph, numDependencies);
}

SIM_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) { return end_capture(hStream, phGraph, false); }
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
  return destroy_handle(&Sim::graphs, hGraph, ForgetNothing{}, [](Sim&, CUgraph h) {
    // a stream still capturing into it keeps it
    return graph_in_capture_locked(h) ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
  });
}
