// The recorder: what cdsa remembers about every launch.
//
//   LaunchRing   the last N launch records (seqlock per record: writers never
//                block, a reader after the fault copies a consistent record)
//   StackTable   interned launch stacks (native PCs + Python frames already
//                resolved to file/function/line), insert-only, lock-free
//   StringTable  interned strings (kernel names, Python files and functions)
//   StreamTable  per-stream state: id, launch counter, breadcrumb slot
//
// Contract: all tables live in memory mapped once at warm-up (`recorder_init`,
// called on the first CUDA call, not in the constructor) and are never freed.
// After warm-up the launch path takes no lock and calls no allocator; a full
// table degrades (stack id kUnknownStack, one notice) rather than growing.
// Readers (`for_each_launch`, `stack`) are meant for the report path.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cdsa {

constexpr uint32_t kUnknownStack = 0xffffffffu;
constexpr uint32_t kNoString = 0xffffffffu;

enum class LaunchKind : uint8_t { Kernel = 0, KernelEx = 1, Cooperative = 2, Graph = 3 };
enum LaunchFlags : uint8_t {
  kFlagCaptured = 1,         // recorded into a graph under stream capture, not run
  kFlagPerThreadStream = 2,  // launched on the per-thread default stream
};

struct LaunchRecord {
  uint64_t seq = 0;         // global launch number, 1-based
  uint64_t stream_seq = 0;  // launch number on its stream, 1-based
  uint64_t stream_id = 0;   // cuStreamGetId
  uint64_t graph_id = 0;    // captured launches: capture id; graph launches: the capture id of the exec
  uint64_t time_ns = 0;     // CLOCK_MONOTONIC
  uint32_t ctx_id = 0;      // cuCtxGetId
  uint32_t tid = 0;         // gettid
  uint32_t stack_id = kUnknownStack;
  uint32_t kernel_name = kNoString;  // StringTable id
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t shared_mem = 0;
  uint32_t stream_slot = 0;  // StreamTable index
  LaunchKind kind = LaunchKind::Kernel;
  uint8_t flags = 0;
};

struct PythonFrame {
  uint32_t file = kNoString;      // StringTable id
  uint32_t function = kNoString;  // StringTable id
  int32_t line = 0;
};

struct Stack {
  std::vector<uintptr_t> native;    // return addresses, innermost first
  std::vector<PythonFrame> python;  // innermost first
};

// ---- setup ----
bool recorder_init() noexcept;  // idempotent; false if memory could not be mapped

// ---- strings ----
uint32_t intern_string(const char* s, size_t len) noexcept;  // kNoString when full
const char* string_at(uint32_t id) noexcept;                 // "" for kNoString

// ---- stacks ----
// Captures the calling thread's native and Python stacks and interns them.
uint32_t capture_and_intern_stack() noexcept;
bool stack_at(uint32_t id, Stack* out);
uint32_t stack_count() noexcept;

// ---- launches ----
uint64_t next_launch_seq() noexcept;
void ring_publish(const LaunchRecord& rec) noexcept;
// Visits the records still in the ring, oldest first.
void ring_snapshot(std::vector<LaunchRecord>* out);
uint64_t launches_recorded() noexcept;
// The fault path seals the ring once its report's snapshot is taken: launches recorded later could not change
// that report, so the launch path asks `ring_sealed()` (one acquire load) and records nothing more. Launches that
// finish while a report still waits for them (shim/record/assert_capture.h, launches in flight) come before the
// seal and are recorded. Nothing unseals it.
namespace recorder_internal {
[[gnu::visibility("hidden")]] extern std::atomic<bool> g_ring_sealed;
}  // namespace recorder_internal
inline void seal_ring() noexcept { recorder_internal::g_ring_sealed.store(true, std::memory_order_release); }
inline bool ring_sealed() noexcept { return recorder_internal::g_ring_sealed.load(std::memory_order_acquire); }

// ---- streams ----
struct StreamState {
  std::atomic<uint64_t> id{0};                   // 0 = free entry; stored +1 so id 0 is usable
  std::atomic<uint64_t> launched{0};             // stream launches so far (last stream_seq handed out)
  std::atomic<uint64_t> breadcrumb_launched{0};  // last stream_seq whose mark was enqueued
  // For the exit probe (shim/fault/fault.cc): a handle and context that name the stream, written when a thread
  // first meets it (shim/record/launch.cc's stream cache).
  std::atomic<uintptr_t> last_handle{0};
  std::atomic<uintptr_t> last_ctx{0};
};
// Finds or creates the state for a stream id; returns its index or -1 when full.
int stream_slot(uint64_t stream_id) noexcept;
StreamState* stream_state(int slot) noexcept;
int stream_slots_used() noexcept;
uint32_t stream_capacity() noexcept;

// ---- small lock-free maps from a handle to a 32-bit value ----
// KernelName: CUfunction -> StringTable id; GraphExec: CUgraphExec -> capture id.
enum class HandleMap { KernelName = 0, GraphExec = 1 };
uint32_t handle_map_get(HandleMap m, uintptr_t key) noexcept;  // kNoString on a miss
void handle_map_put(HandleMap m, uintptr_t key, uint32_t value) noexcept;

const char* recorder_overflow_note() noexcept;  // "" or what filled up
// Bytes the tables reserve (mapped once, MAP_NORESERVE: resident only as they fill); 0 before recorder_init.
uint64_t recorder_mapped_bytes() noexcept;

}  // namespace cdsa
