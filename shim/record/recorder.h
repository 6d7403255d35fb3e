// The recorder: what cdsa remembers about every launch.
//
//   LaunchRing   the last N launch records (seqlock per record: writers never
//                block, a reader after the fault copies a consistent record)
//   StackTable   interned launch stacks (native PCs + Python frames already
//                resolved to file/function/line), lock-free, reclaimed when full
//   StringTable  interned strings (kernel names, Python files and functions),
//                likewise
//   StreamTable  per-stream state: id, launch counter, its breadcrumb (slot, last mark enqueued, the mark still
//                deferred), and a handle, context and thread that name the stream
//
// Contract: all tables live in memory mapped once at warm-up (`recorder_init`,
// called on the first CUDA call, not in the constructor) and are never freed.
// After warm-up the launch path takes no lock and calls no allocator; a table
// never grows: when it runs low, the entries nothing refers to any more are
// reclaimed (see "Holding ids" below), and only a table full of referenced or
// recently used entries degrades (stack id kUnknownStack, one notice). The one
// wait: an insert that finds the table full while another thread of the process
// reclaims it yields to that thread (bounded, 20 ms) before it gives up.
// Readers (`ring_snapshot`, `stack_at`, `string_at`) are for the fault snapshot (shim/fault/fault_snapshot.h):
// the report and the trace are built from that copy, never from these tables.
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
  // Programmatic dependent launch (shim/record/breadcrumbs.h, deferred marks): the launch carried programmatic stream
  // serialization (or a programmatic event), so the mark of the launch before it on its stream was folded into its own.
  kFlagProgrammatic = 8,
  // The launch before it on its stream has no mark of its own (folded by this PDL launch, or its write failed):
  // this launch's mark covers it too.
  kFlagSharesMark = 16,
};

struct LaunchRecord {
  uint64_t seq = 0;         // global launch number, 1-based
  uint64_t stream_seq = 0;  // launch number on its stream, 1-based
  uint64_t stream_id = 0;   // cuStreamGetId
  uint64_t graph_id = 0;    // captured launches: capture id; graph launches: the capture id of the exec
  uint64_t stamp = 0;       // when it was made: a launch_stamp() (shim/record/launch_clock.h)
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
// Strings longer than kMaxInternedString bytes are interned cut to that length.
constexpr size_t kMaxInternedString = 65535;
uint32_t intern_string(const char* s, size_t len) noexcept;  // kNoString when full
// "" for kNoString and for a reclaimed id. The fault snapshot's: the text stays valid once reclamation is held
// (recorder_hold_reclaim), and until then only while the id is pinned.
const char* string_at(uint32_t id) noexcept;
// A copy taken under the entry's seqlock, at any time: false (and `out` empty) for kNoString or a dead id.
bool string_copy(uint32_t id, std::string* out);

// ---- stacks ----
// Captures the calling thread's native and Python stacks and interns them.
uint32_t capture_and_intern_stack() noexcept;
// False for kUnknownStack and for a reclaimed id (never another stack's frames).
bool stack_at(uint32_t id, Stack* out);
uint32_t stack_count() noexcept;  // live entries

// ---- holding ids: the reclamation contract ----
//
// Stack and string ids are 32 bits: a slot index and the slot's generation, which changes every time the slot is
// reclaimed. So an id outlives its entry only as a dead id: stack_at() says false and string_at() "" for it, and
// it never names the entry that reuses the slot. Reclamation runs (on whichever thread's insert finds a table
// running low, never blocking another thread) only when a table runs low, and frees exactly the entries that are
//   - not referenced by a record in the launch ring (the recorder marks those itself),
//   - not pinned (stack_pin / string_pin),
//   - not used since the reclamation before the last: every id returned by capture_and_intern_stack() or
//     intern_string(), or by stack_memo_id() below, is "used now", so the launch that got it may keep it in
//     locals, publish it in the ring or pin it (a thread stalled across two whole reclamations between getting an
//     id and pinning it finds the pin refused: it must then treat the id as unknown).
//   - a string is also kept while a live stack's Python frames name it; a name in the kernel-name map
//     (HandleMap::KernelName) is pinned by the map itself.
//
// Whoever keeps an id beyond the launch that interned it does one of:
//   (a) Pins it, for as long as it may report it: stack_pin(id) / string_pin(id), false if it is already dead
//       (then keep kUnknownStack / kNoString instead); stack_unpin / string_unpin when dropping it. Pins count;
//       each is a CAS on the entry: do it when a holder is created (a graph node, a profile slot), never per
//       launch. Graph nodes (captured and built node by node), the profile and the kernel-name map pin.
//   (b) Remembers it as a StackMemo, checked at every use: a per-thread cache in front of the table (the native
//       stack cache, the Python frame-chain cache). stack_memo(id) to store, stack_memo_id(memo) to use: the id,
//       or kUnknownStack if it may have been reclaimed since (then look the stack up again). A memo costs no
//       store on a shared line; using it keeps the entry "used now". (The launch path's own use,
//       capture_and_intern_stack, takes a memo made or checked in the current epoch as it is: its entry was
//       touched in that epoch, and no reclamation takes it before the epoch moves on.) Never compare raw ids kept
//       across launches without one of (a) or (b): a dead id stays dead, but an unpinned live one may die at any
//       time.
// Everything here is lock-free and allocation-free; stack_pin and stack_memo_id are safe on the launch path.
bool stack_pin(uint32_t id) noexcept;
void stack_unpin(uint32_t id) noexcept;  // one earlier successful stack_pin(id)
bool string_pin(uint32_t id) noexcept;
void string_unpin(uint32_t id) noexcept;
// (a) as a value for holders kept in ordinary containers (graph nodes): pins a stack id and up to two string ids
// while it lives; a copy pins them again, assignment and destruction unpin. An id whose pin was refused reads as
// kUnknownStack / kNoString from stack() / string(i): store those in the holder's record.
class IdPins {
 public:
  IdPins() = default;
  IdPins(uint32_t stack, uint32_t s0, uint32_t s1 = kNoString) noexcept {
    stack_ = stack_pin(stack) ? stack : kUnknownStack;
    str_[0] = string_pin(s0) ? s0 : kNoString;
    str_[1] = string_pin(s1) ? s1 : kNoString;
  }
  IdPins(const IdPins& o) noexcept { copy(o); }
  IdPins(IdPins&& o) noexcept { take(o); }
  IdPins& operator=(const IdPins& o) noexcept {
    if (this != &o) {
      drop();
      copy(o);
    }
    return *this;
  }
  IdPins& operator=(IdPins&& o) noexcept {
    if (this != &o) {
      drop();
      take(o);
    }
    return *this;
  }
  ~IdPins() { drop(); }
  uint32_t stack() const noexcept { return stack_; }
  uint32_t string(int i) const noexcept { return str_[i]; }

 private:
  void copy(const IdPins& o) noexcept {  // o holds its pins: these cannot be refused
    stack_ = stack_pin(o.stack_) ? o.stack_ : kUnknownStack;
    for (int i = 0; i < 2; ++i) str_[i] = string_pin(o.str_[i]) ? o.str_[i] : kNoString;
  }
  void take(IdPins& o) noexcept {
    stack_ = o.stack_;
    str_[0] = o.str_[0];
    str_[1] = o.str_[1];
    o.stack_ = kUnknownStack;
    o.str_[0] = o.str_[1] = kNoString;
  }
  void drop() noexcept {
    stack_unpin(stack_);
    string_unpin(str_[0]);
    string_unpin(str_[1]);
    stack_ = kUnknownStack;
    str_[0] = str_[1] = kNoString;
  }
  uint32_t stack_ = kUnknownStack;
  uint32_t str_[2] = {kNoString, kNoString};
};

using StackMemo = uint64_t;  // 0: nothing remembered
constexpr StackMemo kNoStackMemo = 0;
StackMemo stack_memo(uint32_t id) noexcept;          // kNoStackMemo for kUnknownStack
uint32_t stack_memo_id(StackMemo memo) noexcept;     // kUnknownStack when it may be stale
bool stack_alive(uint32_t id) noexcept;              // a snapshot: true now, may die later unless pinned
// From the fault on: no more reclamation, so that the report reads consistent tables (waits, bounded, for a
// reclamation in progress). Idempotent; never undone.
void recorder_hold_reclaim() noexcept;
// Reclamations so far (tests, stats).
uint64_t recorder_reclaims() noexcept;

// ---- launches ----
namespace recorder_internal {
[[gnu::visibility("hidden")]] extern std::atomic<uint64_t> g_launch_seq;  // the last launch number handed out
}  // namespace recorder_internal
// The next launch number: 1-based, never reused (the ring's slot is seq - 1 modulo its size).
inline uint64_t next_launch_seq() noexcept {
  return recorder_internal::g_launch_seq.fetch_add(1, std::memory_order_relaxed) + 1;
}
void ring_publish(const LaunchRecord& rec) noexcept;
// Visits the records still in the ring, oldest first.
void ring_snapshot(std::vector<LaunchRecord>* out);
uint64_t launches_recorded() noexcept;
// The fault path seals the ring once its report's snapshot is taken: launches recorded later could not change
// that report, so the launch path asks `ring_sealed()` (one acquire load) and records nothing more. Launches that
// finish while a report still waits for them (shim/common/thread_slots.h, launches in flight) come before the
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
  // last stream_seq whose mark was placed (shim/record/breadcrumbs.h: enqueued, or met the dead context in its own
  // launch's call); never above `launched`
  std::atomic<uint64_t> breadcrumb_launched{0};
  std::atomic<uint64_t> deferred{0};  // stream_seq whose mark waits for the stream's next operation; 0: none
  // The last PDL launch's stream_seq (0: none). A stream that has carried one defers its marks from then on, and a
  // mark placed while pdl_last > breadcrumb_launched covers a PDL launch, so it goes behind an event recorded on the
  // stream and waited on (the stream's event, made on its first such mark; 0: none yet, or dropped; breadcrumbs.h).
  std::atomic<uint64_t> pdl_last{0};
  std::atomic<uintptr_t> pdl_event{0};
  // The last stream_seq a successful synchronizing call proved finished (cuStreamSynchronize, cuStreamQuery, or
  // cuCtxSynchronize of the stream's context): every launch numbered before the call began. 0: none.
  std::atomic<uint64_t> synced{0};
  // A handle, context and thread that name the stream, written when a thread first meets it (shim/record/launch.cc's
  // stream cache): the exit probe queries it with them (shim/fault/exit_probe.cc), flush_all_breadcrumbs places its
  // deferred mark (shim/record/breadcrumbs.h), and the snapshot's StreamView::ctx is the context.
  std::atomic<uintptr_t> last_handle{0};
  std::atomic<uintptr_t> last_ctx{0};
  std::atomic<uint32_t> last_tid{0};  // the thread that first met it (a per-thread default stream's own)
  // Device work on the stream that is no launch and may fault (a copy, a memset, a memory operation: Kind::StreamWork,
  // note_stream_work): where each of the last kOpsKept sat, as `launched` read when it was submitted, plus one (0: an
  // empty slot), and in ops_forgotten the highest such value among the older ones (0: none). A value leaves a slot
  // only for ops_forgotten, so every op's position is in a slot or at most ops_forgotten - 1.
  // `ops` counts them (op number n sits in slot n % kOpsKept); ops_synced is how many of them a successful
  // synchronizing call proved finished, as it proves the launches before it (SyncProof): every op numbered below it.
  static constexpr uint32_t kOpsKept = 4;
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> op_at[kOpsKept]{};
  std::atomic<uint64_t> ops_forgotten{0};
  std::atomic<uint64_t> ops_synced{0};
  // Who put work on the stream at the same time as whom (shim/record/stream_order.h): `regions` holds the regions'
  // entries so far (high 32 bits) and how many are open now (low 32 bits); `raced_to` is one past the launches the
  // stream had recorded when the last region that overlapped another exited (0: none did). Launches numbered below
  // raced_to, and the marks and ops around them, may not be in the stream's order.
  std::atomic<uint64_t> regions{0};
  std::atomic<uint64_t> raced_to{0};
};
// Finds or creates the state for a stream id; returns its index or -1 when full.
int stream_slot(uint64_t stream_id) noexcept;
// The state's index for a stream id that has one, else -1 (creates nothing).
int find_stream_slot(uint64_t stream_id) noexcept;
StreamState* stream_state(int slot) noexcept;
int stream_slots_used() noexcept;
uint32_t stream_capacity() noexcept;

// ---- small lock-free maps from a handle to a 32-bit value ----
// KernelName: CUfunction -> StringTable id; GraphExec: CUgraphExec -> capture id.
enum class HandleMap { KernelName = 0, GraphExec = 1 };
uint32_t handle_map_get(HandleMap m, uintptr_t key) noexcept;  // kNoString on a miss
// KernelName values are pinned string ids (the map pins on put and unpins what it replaces; a value that is no
// string id, such as a caller's sentinel >= kNoString - 15, is stored as it is; a dead id is not stored).
void handle_map_put(HandleMap m, uintptr_t key, uint32_t value) noexcept;
// Every value of the map dropped (KernelName: unpinned, and the per-thread name memos refill): after a module or
// library is unloaded its handles' addresses may come back for other kernels, whose names are then asked again.
// The keys stay (a later put for the same key reuses its entry). Lock-free; a racing get sees a miss or the old value.
void handle_map_forget_values(HandleMap m) noexcept;
// Changes to the KernelName map's values so far (every put that reached its entry counts after its store, and every
// handle_map_forget_values after its stores): a per-thread memo of handle_map_get(KernelName, key) taken when this
// read n (read before the get) is still the map's answer while it reads n (keys are never removed; only those two
// change a value).
extern std::atomic<uint64_t> g_kernel_name_puts;
inline uint64_t kernel_name_puts() noexcept { return g_kernel_name_puts.load(std::memory_order_acquire); }

// "" or, for each table that refused inserts, how many (the launches that lost their stack or name).
const char* recorder_overflow_note() noexcept;
// Whether a stream found no entry in the stream table: its launches and work are recorded without their stream's
// state, so they are no candidates and the records are not the whole of the work (no verdict is exact).
bool stream_table_overflowed() noexcept;
// Bytes the tables reserve (mapped once, MAP_NORESERVE: resident only as they fill); 0 before recorder_init.
uint64_t recorder_mapped_bytes() noexcept;

}  // namespace cdsa
