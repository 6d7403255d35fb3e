#include "shim/record/recorder.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <cstring>
#include <mutex>

#include "shim/common/config.h"
#include "shim/common/log.h"
#include "shim/record/native_stack.h"
#include "shim/record/python_stack.h"

namespace cdsa {
namespace {

// ---------------------------------------------------------------- memory
void* map_zeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

inline uint64_t mix(uint64_t h, uint64_t w) {
  h ^= w + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

uint64_t hash_bytes(const char* s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001b3ull;
  return h;
}

std::atomic<const char*> g_overflow{""};
void note_overflow(const char* what) {
  const char* expected = "";
  if (g_overflow.compare_exchange_strong(expected, what))
    log_line("%s: later launches keep being recorded, with less detail", what);
}

// ---------------------------------------------------------------- strings
constexpr uint32_t kMaxStrings = 1u << 17;
constexpr uint32_t kStringBuckets = 1u << 18;
constexpr size_t kStringArena = 16u << 20;

struct StringTable {
  std::atomic<uint32_t>* buckets = nullptr;  // id + 1
  uint32_t* offsets = nullptr;
  uint64_t* hashes = nullptr;
  char* arena = nullptr;
  std::atomic<uint32_t> count{0};
  std::atomic<size_t> used{0};
} g_strings;

// ---------------------------------------------------------------- stacks
struct StackEntry {
  uint64_t hash;
  uint64_t offset;  // into g_frames, in words
  uint16_t n_native;
  uint16_t n_python;
};
// Frame arena layout of one stack: n_native PCs, then n_python PyFrameKeys (2 words each, byte for byte as
// captured, so lookups compare with memcmp), then n_python resolved frames (file|function, line).
constexpr int kPyKeyWords = 2, kPyTextWords = 2;
static_assert(sizeof(PyFrameKey) == kPyKeyWords * sizeof(uint64_t), "PyFrameKey is stored as two words");

struct StackTable {
  uint32_t capacity = 0;
  uint32_t bucket_mask = 0;
  std::atomic<uint32_t>* buckets = nullptr;  // id + 1
  StackEntry* entries = nullptr;
  std::atomic<uint32_t> count{0};
  uint64_t* frames = nullptr;
  uint64_t frame_words = 0;
  std::atomic<uint64_t> frames_used{0};
} g_stacks;

// ---------------------------------------------------------------- ring
constexpr int kRingWords = 10;
struct RingSlot {
  std::atomic<uint64_t> w[kRingWords];
};
struct Ring {
  RingSlot* slots = nullptr;
  uint32_t mask = 0;
  std::atomic<uint64_t> seq{0};
} g_ring;

// ---------------------------------------------------------------- streams
constexpr uint32_t kStreamCapacity = 4096;
StreamState* g_streams = nullptr;
std::atomic<int> g_streams_used{0};

// ---------------------------------------------------------------- handle maps
constexpr uint32_t kFuncCapacity = 1u << 15;
struct FuncEntry {
  std::atomic<uintptr_t> func;
  std::atomic<uint32_t> name;
};
FuncEntry* g_maps[2] = {nullptr, nullptr};

std::once_flag g_init_once;
std::atomic<bool> g_ready{false};

void init_tables() {
  const Config& c = config();
  g_strings.buckets = static_cast<std::atomic<uint32_t>*>(map_zeroed(kStringBuckets * sizeof(uint32_t)));
  g_strings.offsets = static_cast<uint32_t*>(map_zeroed(kMaxStrings * sizeof(uint32_t)));
  g_strings.hashes = static_cast<uint64_t*>(map_zeroed(kMaxStrings * sizeof(uint64_t)));
  g_strings.arena = static_cast<char*>(map_zeroed(kStringArena));

  g_stacks.capacity = c.stack_table_size;
  uint32_t buckets = 1;
  while (buckets < 2 * g_stacks.capacity) buckets <<= 1;
  g_stacks.bucket_mask = buckets - 1;
  g_stacks.buckets = static_cast<std::atomic<uint32_t>*>(map_zeroed(buckets * sizeof(uint32_t)));
  g_stacks.entries = static_cast<StackEntry*>(map_zeroed(g_stacks.capacity * sizeof(StackEntry)));
  // Room for every stack at a typical depth; deeper stacks use more, and a full arena is reported.
  g_stacks.frame_words = static_cast<uint64_t>(g_stacks.capacity) * 64;
  g_stacks.frames = static_cast<uint64_t*>(map_zeroed(g_stacks.frame_words * sizeof(uint64_t)));

  g_ring.mask = c.ring_size - 1;
  g_ring.slots = static_cast<RingSlot*>(map_zeroed(static_cast<size_t>(c.ring_size) * sizeof(RingSlot)));

  g_streams = static_cast<StreamState*>(map_zeroed(kStreamCapacity * sizeof(StreamState)));
  for (auto& m : g_maps) m = static_cast<FuncEntry*>(map_zeroed(kFuncCapacity * sizeof(FuncEntry)));

  if (!g_strings.buckets || !g_strings.offsets || !g_strings.hashes || !g_strings.arena || !g_stacks.buckets ||
      !g_stacks.entries || !g_stacks.frames || !g_ring.slots || !g_streams || !g_maps[0] || !g_maps[1]) {
    log_line("could not map memory for the launch recorder: recording is off");
    return;
  }
  native_stack_init();
  PyWalkerState py = python_walker_init();
  if (py == PyWalkerState::Unsupported) log_line("%s: launches keep their native frames", python_walker_description());
  // Native stacks of launches made from Python stop at the innermost interpreter frame (CDSA_NATIVE_FULL=1 keeps
  // them whole): the interpreter is the object holding its evaluation loop, libpython or the executable.
  if (py == PyWalkerState::Ready && !c.native_full) {
    const char* names[] = {"_PyEval_EvalFrameDefault", "PyEval_EvalCode", "Py_Version"};
    for (const char* name : names)
      if (set_interpreter_range_from(dlsym(RTLD_DEFAULT, name))) break;
  }
  g_ready.store(true, std::memory_order_release);
}

}  // namespace

bool recorder_init() noexcept {
  std::call_once(g_init_once, init_tables);
  return g_ready.load(std::memory_order_acquire);
}

// ================================================================ strings
uint32_t intern_string(const char* s, size_t len) noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return kNoString;
  uint64_t h = hash_bytes(s, len);
  uint32_t mask = kStringBuckets - 1;
  uint32_t mine = kNoString;
  for (uint32_t i = static_cast<uint32_t>(h) & mask, probes = 0; probes < kStringBuckets;
       i = (i + 1) & mask, ++probes) {
    uint32_t v = g_strings.buckets[i].load(std::memory_order_acquire);
    if (v == 0) {
      if (mine == kNoString) {
        mine = g_strings.count.fetch_add(1, std::memory_order_relaxed);
        size_t off = g_strings.used.fetch_add(len + 1, std::memory_order_relaxed);
        if (mine >= kMaxStrings || off + len + 1 > kStringArena) {
          note_overflow("string table full");
          return kNoString;
        }
        memcpy(g_strings.arena + off, s, len);
        g_strings.arena[off + len] = '\0';
        g_strings.offsets[mine] = static_cast<uint32_t>(off);
        g_strings.hashes[mine] = h;
      }
      uint32_t expected = 0;
      if (g_strings.buckets[i].compare_exchange_strong(expected, mine + 1, std::memory_order_acq_rel)) return mine;
      v = expected;
    }
    uint32_t id = v - 1;
    if (g_strings.hashes[id] == h) {
      const char* t = g_strings.arena + g_strings.offsets[id];
      if (strncmp(t, s, len) == 0 && t[len] == '\0') return id;
    }
  }
  note_overflow("string table full");
  return kNoString;
}

const char* string_at(uint32_t id) noexcept {
  if (id == kNoString || !g_ready.load(std::memory_order_acquire) ||
      id >= g_strings.count.load(std::memory_order_acquire) || id >= kMaxStrings)
    return "";
  return g_strings.arena + g_strings.offsets[id];
}

// ================================================================ stacks
namespace {

bool same_frames(const StackEntry& e, const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py) {
  if (e.n_native != n_native || e.n_python != n_py) return false;
  const uint64_t* f = g_stacks.frames + e.offset;
  return memcmp(f, pcs, sizeof(uintptr_t) * static_cast<size_t>(n_native)) == 0 &&
         memcmp(f + n_native, py, sizeof(PyFrameKey) * static_cast<size_t>(n_py)) == 0;
}

uint32_t insert_stack(uint64_t h, const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py, uint32_t bucket) {
  uint32_t id = g_stacks.count.fetch_add(1, std::memory_order_relaxed);
  uint64_t words = static_cast<uint64_t>(n_native) + static_cast<uint64_t>(n_py) * (kPyKeyWords + kPyTextWords);
  uint64_t off = g_stacks.frames_used.fetch_add(words, std::memory_order_relaxed);
  if (id >= g_stacks.capacity || off + words > g_stacks.frame_words) {
    note_overflow("launch stack table full (raise CDSA_STACK_TABLE)");
    return kUnknownStack;
  }
  uint64_t* f = g_stacks.frames + off;
  memcpy(f, pcs, sizeof(uintptr_t) * static_cast<size_t>(n_native));
  memcpy(f + n_native, py, sizeof(PyFrameKey) * static_cast<size_t>(n_py));
  uint64_t* text = f + n_native + static_cast<uint64_t>(n_py) * kPyKeyWords;
  for (int i = 0; i < n_py; ++i, text += kPyTextWords) {
    char file[1024], func[512];
    int line = 0;
    uint32_t file_id = kNoString, func_id = kNoString;
    if (resolve_python_frame(py[i], file, sizeof file, func, sizeof func, &line)) {
      file_id = intern_string(file, strlen(file));
      func_id = intern_string(func, strlen(func));
    }
    text[0] = (static_cast<uint64_t>(file_id) << 32) | func_id;
    text[1] = static_cast<uint64_t>(static_cast<uint32_t>(line));
  }
  g_stacks.entries[id] = StackEntry{h, off, static_cast<uint16_t>(n_native), static_cast<uint16_t>(n_py)};
  // Publish in the bucket; another thread may have published the same stack meanwhile.
  for (uint32_t i = bucket, probes = 0; probes <= g_stacks.bucket_mask; i = (i + 1) & g_stacks.bucket_mask, ++probes) {
    uint32_t expected = 0;
    if (g_stacks.buckets[i].compare_exchange_strong(expected, id + 1, std::memory_order_acq_rel)) return id;
    const StackEntry& e = g_stacks.entries[expected - 1];
    if (e.hash == h && same_frames(e, pcs, n_native, py, n_py)) return expected - 1;
  }
  return kUnknownStack;
}

}  // namespace

namespace {
// Four independent multiply-rotate lanes: the words of a stack hash in about a cycle each.
inline uint64_t lane(uint64_t h, uint64_t w) {
  return ((h ^ w) * 0x9e3779b97f4a7c15ull) << 29 | ((h ^ w) * 0x9e3779b97f4a7c15ull) >> 35;
}
uint64_t hash_words(const uint64_t* w, size_t n, uint64_t seed) {
  uint64_t a = seed, b = seed ^ 0x243f6a8885a308d3ull, c = seed ^ 0x13198a2e03707344ull,
           d = seed ^ 0xa4093822299f31d0ull;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a = lane(a, w[i]);
    b = lane(b, w[i + 1]);
    c = lane(c, w[i + 2]);
    d = lane(d, w[i + 3]);
  }
  for (; i < n; ++i) a = lane(a, w[i]);
  return mix(mix(mix(mix(n, a), b), c), d);
}
uint64_t hash_frames(const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py) {
  uint64_t h = hash_words(reinterpret_cast<const uint64_t*>(pcs), static_cast<size_t>(n_native), 0x452821e638d01377ull);
  return hash_words(reinterpret_cast<const uint64_t*>(py), static_cast<size_t>(n_py) * kPyKeyWords, h);
}
}  // namespace

namespace {
uint32_t lookup_or_insert(const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py) {
  uint64_t h = hash_frames(pcs, n_native, py, n_py);
  uint32_t start = static_cast<uint32_t>(h ^ (h >> 32)) & g_stacks.bucket_mask;
  for (uint32_t i = start, probes = 0; probes <= g_stacks.bucket_mask; i = (i + 1) & g_stacks.bucket_mask, ++probes) {
    uint32_t v = g_stacks.buckets[i].load(std::memory_order_acquire);
    if (v == 0) return insert_stack(h, pcs, n_native, py, n_py, i);
    const StackEntry& e = g_stacks.entries[v - 1];
    if (e.hash == h && same_frames(e, pcs, n_native, py, n_py)) return v - 1;
  }
  return kUnknownStack;
}
}  // namespace

// The Python side of a memo when the launch has no Python frames (no Python, or depth 0): a fixed token.
constexpr uint64_t kNoPythonToken = ~uint64_t{0};

uint32_t capture_and_intern_stack() noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return kUnknownStack;
  const Config& c = config();
  uintptr_t pcs[256];
  PyFrameKey py[256];
  PyCapture pyhow;
  pyhow.borrow = true;
  pyhow.frames = py;
  int n_py = c.python_depth > 0 ? capture_python_frames_cached(py, c.python_depth, &pyhow) : 0;
  NativeCapture how;
  how.stop_at_interpreter = n_py > 0 && !c.native_full;
  how.borrow = true;
  int n_native = capture_native_stack(pcs, c.native_depth, &how);
  if (n_native == 0 && n_py == 0) return kUnknownStack;
  // Both halves served from their verified caches: each carries the id this thread last interned it with, and
  // the token of the other half it was interned with (a token names one fill of one cache entry: the same tokens,
  // the same frames, the same id; no hash, no compare).
  const uint64_t py_token = n_py == 0 ? kNoPythonToken : pyhow.token;
  if (how.token && py_token) {
    if (n_py > 0 && pyhow.memo->id1 != 0 && pyhow.memo->other == how.token) return pyhow.memo->id1 - 1;
    if (how.memo->id1 != 0 && how.memo->other == py_token) return how.memo->id1 - 1;
  }
  uint32_t id = lookup_or_insert(how.frames, n_native, pyhow.frames, n_py);
  if (how.token && py_token && id != kUnknownStack) {
    *how.memo = NativeMemo{py_token, id + 1};
    if (n_py > 0) *pyhow.memo = PyMemo{how.token, id + 1};
  }
  return id;
}

bool stack_at(uint32_t id, Stack* out) {
  out->native.clear();
  out->python.clear();
  if (id == kUnknownStack || !g_ready.load(std::memory_order_acquire)) return false;
  // Only published entries are complete: find it through its bucket state.
  if (id >= g_stacks.count.load(std::memory_order_acquire) || id >= g_stacks.capacity) return false;
  const StackEntry& e = g_stacks.entries[id];
  const uint64_t* f = g_stacks.frames + e.offset;
  for (int i = 0; i < e.n_native; ++i) out->native.push_back(static_cast<uintptr_t>(f[i]));
  f += e.n_native;
  const uint64_t* text = f + static_cast<uint64_t>(e.n_python) * kPyKeyWords;
  for (int i = 0; i < e.n_python; ++i, text += kPyTextWords) {
    PythonFrame pf;
    pf.file = static_cast<uint32_t>(text[0] >> 32);
    pf.function = static_cast<uint32_t>(text[0]);
    pf.line = static_cast<int32_t>(text[1]);
    out->python.push_back(pf);
  }
  return true;
}

uint32_t stack_count() noexcept {
  uint32_t n = g_stacks.count.load(std::memory_order_acquire);
  return n < g_stacks.capacity ? n : g_stacks.capacity;
}

// ================================================================ ring
uint64_t next_launch_seq() noexcept { return g_ring.seq.fetch_add(1, std::memory_order_relaxed) + 1; }
namespace recorder_internal {
std::atomic<bool> g_ring_sealed{false};
}  // namespace recorder_internal

uint64_t launches_recorded() noexcept { return g_ring.seq.load(std::memory_order_relaxed); }

void ring_publish(const LaunchRecord& r) noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return;
  RingSlot& s = g_ring.slots[(r.seq - 1) & g_ring.mask];
  // Claim the slot. Two writers meet here only when one lags a whole ring behind the other: then the newer
  // record wins, and a writer finding another mid-write waits for it rather than interleaving fields.
  constexpr uint64_t kBusy = 1ull << 63;
  for (uint64_t cur = s.w[0].load(std::memory_order_acquire);;) {
    if (cur & kBusy) {
      cur = s.w[0].load(std::memory_order_acquire);
      continue;
    }
    if (cur > r.seq) return;
    if (s.w[0].compare_exchange_weak(cur, r.seq | kBusy, std::memory_order_acquire)) break;
  }
  std::atomic_thread_fence(std::memory_order_release);
  s.w[1].store(r.stream_seq, std::memory_order_relaxed);
  s.w[2].store(r.stream_id, std::memory_order_relaxed);
  s.w[3].store(r.graph_id, std::memory_order_relaxed);
  s.w[4].store(r.time_ns, std::memory_order_relaxed);
  s.w[5].store((static_cast<uint64_t>(r.ctx_id) << 32) | r.tid, std::memory_order_relaxed);
  s.w[6].store((static_cast<uint64_t>(r.stack_id) << 32) | r.kernel_name, std::memory_order_relaxed);
  s.w[7].store((static_cast<uint64_t>(r.grid[0]) << 32) | (static_cast<uint64_t>(r.grid[1] & 0xffff) << 16) |
                   (r.grid[2] & 0xffff),
               std::memory_order_relaxed);
  s.w[8].store((static_cast<uint64_t>(r.block[0] & 0xffff) << 48) | (static_cast<uint64_t>(r.block[1] & 0xffff) << 32) |
                   (static_cast<uint64_t>(r.block[2] & 0xffff) << 16) |
                   (static_cast<uint64_t>(static_cast<uint8_t>(r.kind)) << 8) | r.flags,
               std::memory_order_relaxed);
  s.w[9].store((static_cast<uint64_t>(r.shared_mem) << 32) | r.stream_slot, std::memory_order_relaxed);
  s.w[0].store(r.seq, std::memory_order_release);
}

void ring_snapshot(std::vector<LaunchRecord>* out) {
  out->clear();
  if (!g_ready.load(std::memory_order_acquire)) return;
  uint64_t last = g_ring.seq.load(std::memory_order_acquire);
  uint64_t cap = static_cast<uint64_t>(g_ring.mask) + 1;
  uint64_t first = last > cap ? last - cap + 1 : 1;
  for (uint64_t seq = first; seq <= last; ++seq) {
    RingSlot& s = g_ring.slots[(seq - 1) & g_ring.mask];
    uint64_t w[kRingWords];
    w[0] = s.w[0].load(std::memory_order_acquire);
    if (w[0] != seq) continue;  // overwritten or still being written
    for (int i = 1; i < kRingWords; ++i) w[i] = s.w[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.w[0].load(std::memory_order_relaxed) != seq) continue;
    LaunchRecord r;
    r.seq = w[0];
    r.stream_seq = w[1];
    r.stream_id = w[2];
    r.graph_id = w[3];
    r.time_ns = w[4];
    r.ctx_id = static_cast<uint32_t>(w[5] >> 32);
    r.tid = static_cast<uint32_t>(w[5]);
    r.stack_id = static_cast<uint32_t>(w[6] >> 32);
    r.kernel_name = static_cast<uint32_t>(w[6]);
    r.grid[0] = static_cast<uint32_t>(w[7] >> 32);
    r.grid[1] = static_cast<uint32_t>((w[7] >> 16) & 0xffff);
    r.grid[2] = static_cast<uint32_t>(w[7] & 0xffff);
    r.block[0] = static_cast<uint32_t>((w[8] >> 48) & 0xffff);
    r.block[1] = static_cast<uint32_t>((w[8] >> 32) & 0xffff);
    r.block[2] = static_cast<uint32_t>((w[8] >> 16) & 0xffff);
    r.kind = static_cast<LaunchKind>((w[8] >> 8) & 0xff);
    r.flags = static_cast<uint8_t>(w[8] & 0xff);
    r.shared_mem = static_cast<uint32_t>(w[9] >> 32);
    r.stream_slot = static_cast<uint32_t>(w[9]);
    out->push_back(r);
  }
}

// ================================================================ streams
int stream_slot(uint64_t stream_id) noexcept {
  if (!g_streams) return -1;
  uint64_t key = stream_id + 1;
  uint32_t start = static_cast<uint32_t>(mix(0, key)) & (kStreamCapacity - 1);
  for (uint32_t i = start, probes = 0; probes < kStreamCapacity; i = (i + 1) & (kStreamCapacity - 1), ++probes) {
    uint64_t v = g_streams[i].id.load(std::memory_order_acquire);
    if (v == key) return static_cast<int>(i);
    if (v == 0) {
      uint64_t expected = 0;
      if (g_streams[i].id.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
        g_streams_used.fetch_add(1, std::memory_order_relaxed);
        return static_cast<int>(i);
      }
      if (expected == key) return static_cast<int>(i);
    }
  }
  note_overflow("stream table full (4096 streams)");
  return -1;
}

StreamState* stream_state(int slot) noexcept { return (slot < 0 || !g_streams) ? nullptr : &g_streams[slot]; }
int stream_slots_used() noexcept { return g_streams_used.load(std::memory_order_relaxed); }
uint32_t stream_capacity() noexcept { return kStreamCapacity; }

// ================================================================ handle maps
uint32_t handle_map_get(HandleMap m, uintptr_t func) noexcept {
  FuncEntry* g_funcs = g_maps[static_cast<int>(m)];
  if (!g_funcs) return kNoString;
  uint32_t start = static_cast<uint32_t>(mix(0, func)) & (kFuncCapacity - 1);
  for (uint32_t i = start, probes = 0; probes < 64; i = (i + 1) & (kFuncCapacity - 1), ++probes) {
    uintptr_t k = g_funcs[i].func.load(std::memory_order_acquire);
    if (k == func) {
      uint32_t n = g_funcs[i].name.load(std::memory_order_acquire);  // id + 1; 0 while being stored
      return n == 0 ? kNoString : n - 1;
    }
    if (k == 0) return kNoString;
  }
  return kNoString;
}

void handle_map_put(HandleMap m, uintptr_t func, uint32_t name) noexcept {
  FuncEntry* g_funcs = g_maps[static_cast<int>(m)];
  if (!g_funcs || name == kNoString) return;
  uint32_t start = static_cast<uint32_t>(mix(0, func)) & (kFuncCapacity - 1);
  for (uint32_t i = start, probes = 0; probes < 64; i = (i + 1) & (kFuncCapacity - 1), ++probes) {
    uintptr_t expected = 0;
    if (g_funcs[i].func.compare_exchange_strong(expected, func, std::memory_order_acq_rel) || expected == func) {
      g_funcs[i].name.store(name + 1, std::memory_order_release);
      return;
    }
  }
}

const char* recorder_overflow_note() noexcept { return g_overflow.load(); }

uint64_t recorder_mapped_bytes() noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return 0;
  uint64_t strings =
      kStringBuckets * sizeof(uint32_t) + kMaxStrings * (sizeof(uint32_t) + sizeof(uint64_t)) + kStringArena;
  uint64_t stacks = (static_cast<uint64_t>(g_stacks.bucket_mask) + 1) * sizeof(uint32_t) +
                    static_cast<uint64_t>(g_stacks.capacity) * sizeof(StackEntry) +
                    g_stacks.frame_words * sizeof(uint64_t);
  uint64_t ring = (static_cast<uint64_t>(g_ring.mask) + 1) * sizeof(RingSlot);
  uint64_t rest = kStreamCapacity * sizeof(StreamState) + 2 * kFuncCapacity * sizeof(FuncEntry);
  return strings + stacks + ring + rest;
}

}  // namespace cdsa
