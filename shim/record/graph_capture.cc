#include "shim/record/graph_capture.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "shim/common/driver.h"

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
// Capture id -> how many live handles (its CUgraph, the CUgraphExecs instantiated from it) still name it. At 0 the
// capture is retired: its nodes stay for a report about a launch of it that may still be running (the driver lets
// a program destroy an exec it has just launched, and a destroy call may itself surface the fault), and go when the
// bound needs their room, so destroyed graphs neither pile up nor crowd out live ones.
std::unordered_map<uint32_t, uint32_t>* g_capture_refs = nullptr;
std::unordered_set<uint32_t>* g_retired = nullptr;
std::vector<LaunchRecord>* g_capture_nodes = nullptr;  // every captured launch of a live or retired graph, bounded
constexpr size_t kMaxCaptureNodes = 1 << 16;
// A destroyed CUgraphExec's entry in the lock-free exec map (which has no erase): no capture.
constexpr uint32_t kNoCapture = 0;  // capture ids start at 1

uint64_t stream_id_of(const InCdsa&, CUstream s) {
  unsigned long long id = 0;
  if (driver().StreamGetId) driver().StreamGetId(s, &id);
  return id;
}

bool ready() { return g_ready.load(std::memory_order_acquire); }

// One handle naming `capture_id` is gone: at the last, the capture is retired. Under g_capture_mutex.
void drop_capture_ref(uint32_t capture_id) {
  auto it = g_capture_refs->find(capture_id);
  if (it == g_capture_refs->end() || --it->second != 0) return;
  g_capture_refs->erase(it);
  g_retired->insert(capture_id);
}

// The bound is reached: the retired captures' nodes make room. Under g_capture_mutex.
void evict_retired() {
  if (g_retired->empty()) return;
  std::erase_if(*g_capture_nodes, [](const LaunchRecord& r) { return g_retired->count(r.graph_id) != 0; });
  g_retired->clear();
}

}  // namespace

void graph_capture_init() noexcept {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  if (g_capture_nodes) return;
  g_capture_by_stream = new std::map<uint64_t, uint32_t>;
  g_capture_by_graph = new std::unordered_map<uintptr_t, uint32_t>;
  g_capture_refs = new std::unordered_map<uint32_t, uint32_t>;
  g_retired = new std::unordered_set<uint32_t>;
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
  if (graph) {
    // Into an existing graph (cuStreamBeginCaptureToGraph) the graph may already name an earlier capture.
    auto [at, fresh] = g_capture_by_graph->try_emplace(reinterpret_cast<uintptr_t>(graph), it->second);
    if (!fresh) {
      drop_capture_ref(at->second);
      at->second = it->second;
    }
    ++(*g_capture_refs)[it->second];
  } else {
    // A failed capture: nothing names its nodes, and nothing can launch them.
    std::erase_if(*g_capture_nodes, [id = it->second](const LaunchRecord& r) { return r.graph_id == id; });
  }
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
    ++(*g_capture_refs)[token];
  }
  handle_map_put(HandleMap::GraphExec, reinterpret_cast<uintptr_t>(exec), token);
}

void note_graph_destroy(CUgraph graph) noexcept {
  if (!ready() || !graph) return;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  auto it = g_capture_by_graph->find(reinterpret_cast<uintptr_t>(graph));
  if (it == g_capture_by_graph->end()) return;
  uint32_t capture_id = it->second;
  g_capture_by_graph->erase(it);
  drop_capture_ref(capture_id);
}

void note_graph_destroy(CUgraphExec exec) noexcept {
  if (!ready() || !exec) return;
  auto key = reinterpret_cast<uintptr_t>(exec);
  uint32_t capture_id = handle_map_get(HandleMap::GraphExec, key);
  if (capture_id == kNoString || capture_id == kNoCapture) return;
  handle_map_put(HandleMap::GraphExec, key, kNoCapture);
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  drop_capture_ref(capture_id);
}

void note_captured_launch(const InCdsa&, LaunchRecord* r) noexcept {
  if (!ready()) return;
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  auto it = g_capture_by_stream->find(r->stream_id);
  if (it != g_capture_by_stream->end())
    r->graph_id = it->second;
  else if (g_capture_by_stream->size() == 1)
    r->graph_id = g_capture_by_stream->begin()->second;  // joined stream
  if (g_capture_nodes->size() >= kMaxCaptureNodes) evict_retired();
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
