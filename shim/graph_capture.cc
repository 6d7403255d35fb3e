#include "shim/graph_capture.h"

#include <map>
#include <mutex>
#include <unordered_map>

#include "shim/driver.h"

namespace cdsa {

namespace graph_capture_internal {
std::atomic<int> g_captures_active{0};
}  // namespace graph_capture_internal

namespace {

using graph_capture_internal::g_captures_active;

std::atomic<bool> g_ready{false};
std::mutex g_capture_mutex;
uint32_t g_next_capture = 0;
std::map<uint64_t, uint32_t>* g_capture_by_stream = nullptr;  // stream id -> capture id
std::unordered_map<uintptr_t, uint32_t>* g_capture_by_graph = nullptr;
std::vector<LaunchRecord>* g_capture_nodes = nullptr;  // every captured launch, bounded
constexpr size_t kMaxCaptureNodes = 1 << 16;

uint64_t stream_id_of(const InCdsa&, CUstream s) {
  unsigned long long id = 0;
  if (driver().StreamGetId) driver().StreamGetId(s, &id);
  return id;
}

bool ready() { return g_ready.load(std::memory_order_acquire); }

}  // namespace

void graph_capture_init() noexcept {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (g_capture_nodes) return;
  g_capture_by_stream = new std::map<uint64_t, uint32_t>;
  g_capture_by_graph = new std::unordered_map<uintptr_t, uint32_t>;
  g_capture_nodes = new std::vector<LaunchRecord>;
  g_ready.store(true, std::memory_order_release);
}

void note_capture_begin(CUstream stream, bool per_thread) noexcept {
  if (!ready()) return;
  InCdsa guard;
  uint64_t id = stream_id_of(guard, effective_stream(stream, per_thread));
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  (*g_capture_by_stream)[id] = ++g_next_capture;
  g_captures_active.fetch_add(1, std::memory_order_acq_rel);
}

void note_capture_end(CUstream stream, bool per_thread, CUgraph graph) noexcept {
  if (!ready()) return;
  InCdsa guard;
  uint64_t id = stream_id_of(guard, effective_stream(stream, per_thread));
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  auto it = g_capture_by_stream->find(id);
  if (it == g_capture_by_stream->end()) return;
  if (graph) (*g_capture_by_graph)[reinterpret_cast<uintptr_t>(graph)] = it->second;
  g_capture_by_stream->erase(it);
  g_captures_active.fetch_sub(1, std::memory_order_acq_rel);
}

void note_graph_instantiate(CUgraphExec exec, CUgraph graph) noexcept {
  if (!ready() || !exec) return;
  uint32_t token = 0;
  {
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    auto it = g_capture_by_graph->find(reinterpret_cast<uintptr_t>(graph));
    if (it == g_capture_by_graph->end()) return;
    token = it->second;
  }
  handle_map_put(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(exec), token);
}

void note_captured_launch(const InCdsa&, LaunchRecord* r) noexcept {
  if (!ready()) return;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  auto it = g_capture_by_stream->find(r->stream_id);
  if (it != g_capture_by_stream->end())
    r->graph_id = it->second;
  else if (g_capture_by_stream->size() == 1)
    r->graph_id = g_capture_by_stream->begin()->second;  // joined stream
  if (g_capture_nodes->size() < kMaxCaptureNodes) g_capture_nodes->push_back(*r);
}

std::vector<LaunchRecord> captured_nodes(uint64_t capture_id) {
  std::vector<LaunchRecord> out;
  if (!ready() || capture_id == 0) return out;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  for (const auto& r : *g_capture_nodes)
    if (r.graph_id == capture_id) out.push_back(r);
  return out;
}

}  // namespace cdsa
