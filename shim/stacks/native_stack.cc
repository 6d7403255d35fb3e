// Native stacks through the verified cache in front of libunwind (native_stack.h has the contract; libunwind
// itself is loaded by native_unwinder.cc).
#include "shim/stacks/native_stack.h"

#include <link.h>
#include <pthread.h>
#include <ucontext.h>
#include <atomic>
#include <cstring>
#include <type_traits>

#include "base/arch.h"
#include "shim/common/thread_block.h"
#include "shim/stacks/native_unwinder_internal.h"

namespace cdsa {
namespace {

using namespace native_internal;

uintptr_t g_self_lo = 0, g_self_hi = 0;
std::atomic<uintptr_t> g_interp_lo{0}, g_interp_hi{0};

int find_self(dl_phdr_info* info, size_t, void* data) {
  auto self = reinterpret_cast<uintptr_t>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
    if (self >= lo && self < hi) {
      // The whole object: from its lowest to its highest PT_LOAD.
      uintptr_t olo = UINTPTR_MAX, ohi = 0;
      for (int j = 0; j < info->dlpi_phnum; ++j) {
        const auto& p = info->dlpi_phdr[j];
        if (p.p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + p.p_vaddr;
        if (a < olo) olo = a;
        if (a + p.p_memsz > ohi) ohi = a + p.p_memsz;
      }
      g_self_lo = olo;
      g_self_hi = ohi;
      return 1;
    }
  }
  return 0;
}


// ---- the object holding an address ----
struct ObjectQuery {
  uintptr_t addr, lo, hi;
};
int find_object(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<ObjectQuery*>(data);
  uintptr_t olo = UINTPTR_MAX, ohi = 0;
  bool inside = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& p = info->dlpi_phdr[i];
    if (p.p_type != PT_LOAD) continue;
    uintptr_t a = info->dlpi_addr + p.p_vaddr;
    if (q->addr >= a && q->addr < a + p.p_memsz) inside = true;
    if (a < olo) olo = a;
    if (a + p.p_memsz > ohi) ohi = a + p.p_memsz;
  }
  if (!inside) return 0;
  q->lo = olo;
  q->hi = ohi;
  return 1;
}


// ---- the verified cache ----
//
// Why a hit is exact. Unwinding one frame on x86-64 (aarch64: below) computes the caller's registers from the frame's: the CFA is
// SP + c or BP + c (c and the register fixed by the frame's PC through its CFI), the return address is read from
// a slot at a fixed offset from the CFA, a saved BP from another such slot. So the whole unwind is a function of
// (PC, SP, BP) at the capture point and of the slots it read. The capture point is one fixed instruction in
// capture_native_stack, the SP is the key, and the fill records every slot read with its value: a return address
// slot for each frame, and, for each frame whose CFA is BP-based (recognised as CFA == BP + 16, the x86-64
// frame-pointer prologue; a coincidence only adds a check), the slot its BP came from (or BP itself when no inner
// frame saved it). If all those slots hold the same values, each step computes the same CFA, reads the same
// slots and returns the same caller: the same stack. Not cached, because that argument does not hold for them:
// signal frames (registers restored from a signal context), frames without unwind info (JIT code: libunwind
// guesses), stack-realigning prologues whose CFA is loaded from the stack (GCC's DRAP), stacks read through
// anything but memory in this thread's stack, and everything after a library is unloaded.
//
// On aarch64 the same argument holds with x29 for BP: the CFA is SP + c or x29 + c, the return address is read
// (as the caller's x30) from a slot at a fixed offset from the CFA, the caller's x29 from another. Only which
// frames are x29-based cannot be told from the CFA's value there (base/arch.h, cfa_may_use_fp), so every frame's
// saved-x29 slot is checked. A return address that still carries a pointer-authentication signature (the walk's
// value differs from its stripped form) is not cached either: the entry serves its checked values as the frames,
// and those must be plain code addresses.
//
// Many sites. Sites called in turn from one loop capture at the same stack pointer, so the key is the stack
// pointer plus the return address of the first recorded frame (the launch site in the caller), read from the slot
// the last fill found it in: `probe` offsets per thread (one per path through cdsa to the capture point, usually
// one or two). The key only picks candidates; a candidate is served only after every check passed, so the key
// cannot make a hit wrong, only a miss more likely. Sets of kWays ways, their tags side by side (one SSE compare
// per four ways on x86-64: base/arch.h), not-recently-used replacement.
//
// The checks: offsets from the stack pointer (the slots of a hit are exactly the fill's: the same SP) and the
// values, return-address slots first in frame order (so the recorded frames are a run of the values: no second
// copy), then the saved-BP slots; compared eight at a time, folding differences into one word (four instructions
// a slot).
constexpr int kWays = 16, kSets = 32, kEntries = kWays * kSets;
constexpr int kMaxFrames = 80;  // frames walked, cdsa's own included (CDSA_NATIVE_DEPTH 48 by default)
constexpr int kVetted = 512;    // per thread: code addresses already checked for unwind info and prologue
constexpr int kMaxChecks = 2 * kMaxFrames;
constexpr int kCheckBlock = 8;  // checks_hold compares this many slots per test
static_assert(kMaxChecks % kCheckBlock == 0, "checks are padded to whole blocks within the arrays");
constexpr int kProbes = 4;
constexpr uint32_t kNoProbe = 0xffffffffu;  // a stack without a recorded frame: keyed by the SP alone

struct Entry {
  uintptr_t sp0, ip0, bp0;  // sp0 == 0: empty
  uint64_t subs;
  uint64_t token;  // this fill's number in the thread (never 0): memos name a stack by it
  NativeMemo memo;
  uint32_t probe_off;
  int16_t max;
  uint8_t need_bp0, stop;
  uint8_t uncacheable;  // the last fill from this key could not be cached: unwind plainly
  uint8_t retries;
  uint8_t served;  // hit since its fill
  uint16_t n_checks, first_out, n_out;
  uint32_t off[kMaxChecks];    // slot - sp0
  uintptr_t val[kMaxChecks];   // what the unwinder read there
};
struct Stats {
  uint64_t hits, fills, uncacheable, plain;
};
// No member initialisers: the block comes zeroed from mmap and stays untouched (not resident) until used.
struct ThreadCache {
  // The thread's stack, from pthread_getattr_np: false (no cache) where it cannot be had.
  bool attach() noexcept {
    pthread_attr_t attr;
    void* lo = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return false;
    int rc = pthread_attr_getstack(&attr, &lo, &size);
    pthread_attr_destroy(&attr);
    if (rc != 0 || !lo || !size) return false;
    stack_lo = reinterpret_cast<uintptr_t>(lo);
    stack_hi = stack_lo + size;
    return true;
  }
  uintptr_t stack_lo, stack_hi;
  uint32_t wasted;   // fills in a row that evicted a stack never served since its own fill
  uint32_t skipped;  // misses not filled since the last fill
  uint32_t n_probes;
  uint32_t probe[kProbes];
  uint64_t tokens;
  Stats stats;
  // What get_proc_info said about a code address (it dominates a fill's cost): ip, and the unload count it was
  // asked at, shifted left, | 1 if the frame may be cached. Direct-mapped.
  uintptr_t vetted_ip[kVetted];
  uint64_t vetted[kVetted];
  // The entry last served or filled, and its probe value then: tried first, before the key is hashed and the set
  // searched (one site launching again and again). Only a shortcut to a candidate: a hit still needs its key and
  // every check, as from the set; an entry refilled or emptied since fails them like any other.
  Entry* last;
  uintptr_t last_v;
  alignas(64) uint32_t tags[kSets][kWays];  // 0: empty way
  uint16_t used[kSets];                     // per set: ways hit or filled since the last sweep
  Entry scratch;  // a fill's walk, copied into its way once the key is known
  Entry e[kEntries];
};
static_assert(std::is_trivially_default_constructible_v<ThreadCache>, "mapped zeroed, never written at start");

// A ThreadBlock: one pointer of initial-exec TLS; the cache itself is mapped on the thread's first capture and
// unmapped when the thread exits.
ThreadCache* thread_cache() { return ThreadBlock<ThreadCache>::get(); }

inline uint32_t key_hash(uintptr_t sp0, uint32_t off, uintptr_t v) {
  uint64_t h = (sp0 ^ (static_cast<uint64_t>(off) << 40) ^ (v * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  uint32_t t = static_cast<uint32_t>(h >> 32);
  return t ? t : 1;
}
inline uint32_t set_of(uint32_t tag) { return tag & (kSets - 1); }

// The probe and the checks read words of this thread's stack that belong to other frames (a return-address slot
// found by the fill, read again from another call chain, may lie in what AddressSanitizer marks as a local's
// redzone now): legal reads of mapped memory of our own stack, so not instrumented in sanitizer builds.
#if defined(__SANITIZE_ADDRESS__)
#define CDSA_READS_OWN_STACK __attribute__((no_sanitize_address, noinline))
#else
#define CDSA_READS_OWN_STACK
#endif

// The probe value: the word `off` above the SP, if that lies in this thread's stack.
CDSA_READS_OWN_STACK inline bool probe_value(const ThreadCache* tc, uintptr_t sp0, uint32_t off, uintptr_t* v) {
  if (off == kNoProbe) {
    *v = 0;
    return true;
  }
  uintptr_t a = sp0 + off;
  if (a < sp0 || a + sizeof(uintptr_t) > tc->stack_hi) return false;
  *v = *reinterpret_cast<const volatile uintptr_t*>(a);
  return true;
}

// The ways of a set whose tag is `tag`, as a bit mask.
static_assert(kWays == 16, "arch::match_16_tags compares one set's tags at once");
inline uint32_t matching_ways(const ThreadCache* tc, uint32_t set, uint32_t tag) {
  return arch::match_16_tags(tc->tags[set], tag);
}

// True if every checked slot still holds what the unwinder read. n_checks is a whole number of blocks (walk() pads
// it): per slot an offset load, the slot's load with the offset as index, an xor with the value and an or. The
// slots are plain loads, not volatile ones (those cost an address add each): nothing in this function writes the
// stack, and the compiler barrier keeps them from being moved before the caller's getcontext.
CDSA_READS_OWN_STACK inline bool checks_hold(const Entry& e, uintptr_t sp0) {
  const uint32_t* off = e.off;
  const uint32_t* const end = off + e.n_checks;
  const uintptr_t* val = e.val;
  const char* base = reinterpret_cast<const char*>(sp0);
  asm volatile("" ::: "memory");
  // A macro, not a lambda: a lambda would be a function of its own, instrumented under AddressSanitizer.
#define CDSA_AT(i) (*reinterpret_cast<const uintptr_t*>(base + off[i]) ^ val[i])
  for (; off != end; off += kCheckBlock, val += kCheckBlock)
    if ((CDSA_AT(0) | CDSA_AT(1) | CDSA_AT(2) | CDSA_AT(3) | CDSA_AT(4) | CDSA_AT(5) | CDSA_AT(6) | CDSA_AT(7)) != 0)
      return false;
#undef CDSA_AT
  return true;
}

// Whether the code at `ip` has unwind info (not JIT code) and no stack-realigning prologue: asked of libunwind
// once per code address (per thread and library generation).
bool has_plain_unwind_info(ThreadCache* tc, UnwCursor* cur, uint64_t ip, uint64_t unloads) {
  uint32_t i = static_cast<uint32_t>((ip * 0x9e3779b97f4a7c15ull) >> 32) & (kVetted - 1);
  if (tc->vetted_ip[i] == ip && (tc->vetted[i] >> 1) == unloads) return tc->vetted[i] & 1;
  UnwProcInfo pi{};
  bool ok = g_walker.get_proc_info(cur, &pi) >= 0 && !arch::realigns_stack(pi.start_ip, pi.end_ip);
  tc->vetted_ip[i] = static_cast<uintptr_t>(ip);
  tc->vetted[i] = (unloads << 1) | (ok ? 1 : 0);
  return ok;
}

// Unwinds from `uc` step by step into `out`; when `e` is given, also records the checks that make the result
// reusable, and leaves `e` valid only if the stack may be cached.
// The call of plain_backtrace from a capture function, kept a real call (not a jump) so that its caller's
// frame is on the stack.
#define PLAIN_BACKTRACE(...)                     \
  do {                                           \
    int plain_n_ = plain_backtrace(__VA_ARGS__); \
    asm volatile("" ::: "memory");               \
    return plain_n_;                             \
  } while (0)

// Walks into `e` when given (then e->n_checks etc. describe the result, e->uncacheable says whether it may be
// cached); *probe_off: the offset from the SP of the slot the first recorded frame's return address was read
// from, kNoProbe when there is none.
int walk(ucontext_t* uc, uintptr_t* out, int max, bool stop, ThreadCache* tc, Entry* e, uint64_t unloads,
         uint32_t* probe_off) {
  const Walker& w = g_walker;
  *probe_off = kNoProbe;
  UnwCursor cur;
  if (w.init_local(&cur, uc) < 0) return 0;
  const uintptr_t uc_lo = reinterpret_cast<uintptr_t>(uc), uc_hi = uc_lo + sizeof *uc;
  const uintptr_t sp0 = arch::sp_of(*uc);
  bool ok = e != nullptr && sp0 >= tc->stack_lo && sp0 < tc->stack_hi;
  auto in_stack = [&](uintptr_t a) {
    return a >= sp0 && a + sizeof(uintptr_t) <= tc->stack_hi && (a & 7) == 0 && a - sp0 < kNoProbe;
  };
  int n_out = 0, n_ra = 0, n_bp = 0, first_out = 0;
  uint32_t bp_off[kMaxFrames];
  uintptr_t bp_val[kMaxFrames];
  bool skipping = true, need_bp0 = false;
  uint64_t prev_bp = 0;
  UnwSaveLoc prev_bp_loc{};
  for (int frame = 0;; ++frame) {
    uint64_t ip = 0, sp = 0, bp = 0;
    if (w.get_reg(&cur, kUnwPc, &ip) < 0 || w.get_reg(&cur, kUnwSp, &sp) < 0 || w.get_reg(&cur, kUnwFp, &bp) < 0)
      break;
    // A signed return address (aarch64's pointer authentication) is recorded stripped and not cached.
    if (arch::strip_code_address(static_cast<uintptr_t>(ip)) != ip) {
      ip = arch::strip_code_address(static_cast<uintptr_t>(ip));
      ok = false;
    }
    const bool output = frame > 0 && !(skipping && pc_in_cdsa(ip));
    if (frame > 0 && (ok || (output && skipping && e))) {
      UnwSaveLoc loc{};
      // This frame's PC was read from a slot by the last step.
      const bool in_slot = w.get_save_loc(&cur, kUnwReturnSlot, &loc) >= 0 && loc.type == kSlotMemory && in_stack(loc.addr);
      if (in_slot && output && skipping) *probe_off = static_cast<uint32_t>(loc.addr - sp0);
      if (!in_slot || n_ra >= kMaxFrames) {
        ok = false;
      } else if (ok) {
        e->off[n_ra] = static_cast<uint32_t>(loc.addr - sp0);
        e->val[n_ra++] = static_cast<uintptr_t>(ip);
      }
      // The last frame's CFA was (or may have been) BP-based: the BP it used must be the same.
      if (ok && arch::cfa_may_use_fp(sp, prev_bp)) {
        if (prev_bp_loc.type == kSlotMemory && prev_bp_loc.addr >= uc_lo && prev_bp_loc.addr < uc_hi) {
          need_bp0 = true;
        } else if (prev_bp_loc.type == kSlotMemory && in_stack(prev_bp_loc.addr) && n_bp < kMaxFrames) {
          bp_off[n_bp] = static_cast<uint32_t>(prev_bp_loc.addr - sp0);
          bp_val[n_bp++] = static_cast<uintptr_t>(prev_bp);
        } else {
          ok = false;
        }
      }
    }
    if (!output) {
      // The capture function itself (unw_backtrace leaves out its own frame too), then cdsa's own frames: dropped.
    } else {
      if (skipping) first_out = n_ra - 1;
      skipping = false;
      out[n_out++] = ip;
      if (n_out >= max || (stop && pc_in_interpreter(ip))) break;
    }
    if (ok) ok = frame + 1 < kMaxFrames && w.is_signal_frame(&cur) <= 0 && has_plain_unwind_info(tc, &cur, ip, unloads);
    if (ok) {
      prev_bp = bp;
      if (w.get_save_loc(&cur, kUnwFp, &prev_bp_loc) < 0) ok = false;
    }
    int r = w.step(&cur);
    if (r < 0) ok = false;
    if (r <= 0) break;
  }
  if (!e) return n_out;
  e->ip0 = arch::pc_of(*uc);
  e->bp0 = arch::fp_of(*uc);
  e->max = static_cast<int16_t>(max);
  e->stop = stop;
  e->memo = NativeMemo{};
  e->probe_off = *probe_off;
  e->sp0 = sp0;
  e->retries = 0;
  e->served = 0;
  if (!ok || unloads >= kDlcloseInProgress || n_ra + n_bp > kMaxChecks || (n_out > 0 && first_out < 0)) {
    // Remembered as such, so the next capture from here unwinds plainly instead of paying for a fill.
    e->need_bp0 = 0;
    e->uncacheable = 1;
    e->n_checks = 0;
    e->n_out = 0;
    e->token = 0;
    return n_out;
  }
  e->uncacheable = 0;
  e->need_bp0 = need_bp0;
  e->subs = unloads;
  e->token = ++tc->tokens;
  memcpy(e->off + n_ra, bp_off, sizeof(uint32_t) * static_cast<size_t>(n_bp));
  memcpy(e->val + n_ra, bp_val, sizeof(uintptr_t) * static_cast<size_t>(n_bp));
  // Padded to whole blocks of kCheckBlock with copies of the first check (one more read of a slot already checked),
  // so that checks_hold has no remainder loop.
  int n_checks = n_ra + n_bp;
  for (; n_checks % kCheckBlock != 0 && n_checks > 0; ++n_checks) {
    e->off[n_checks] = e->off[0];
    e->val[n_checks] = e->val[0];
  }
  e->n_checks = static_cast<uint16_t>(n_checks);
  e->first_out = static_cast<uint16_t>(n_out > 0 ? first_out : 0);
  e->n_out = static_cast<uint16_t>(n_out);
  return n_out;
}

// True if `e` is the entry of this capture point (the checks aside).
inline bool same_key(const Entry& e, uintptr_t sp0, uint32_t off, const ucontext_t& uc, int max, bool stop) {
  return e.sp0 == sp0 && e.probe_off == off && e.ip0 == arch::pc_of(uc) && e.max == max && e.stop == stop &&
         (!e.need_bp0 || e.bp0 == arch::fp_of(uc));
}

// Copies a walked entry into its way: the way of an uncacheable entry of the same key if the set has one (a retried
// fill), else one not recently used. Cached stacks of one key stay side by side: two sites whose first recorded
// frame is the same (a helper called from both) share their key and differ in later checks.
Entry* place(ThreadCache* tc, const Entry& s, const ucontext_t& uc) {
  uintptr_t v = 0;
  if (!probe_value(tc, s.sp0, s.probe_off, &v)) return nullptr;
  const uint32_t tag = key_hash(s.sp0, s.probe_off, v), set = set_of(tag);
  int way = -1;
  for (uint32_t m = matching_ways(tc, set, tag); m && way < 0; m &= m - 1) {
    int w = __builtin_ctz(m);
    const Entry& o = tc->e[set * kWays + w];
    if (o.uncacheable && same_key(o, s.sp0, s.probe_off, uc, s.max, s.stop)) way = w;
  }
  if (way < 0) {
    uint32_t free = ~static_cast<uint32_t>(tc->used[set]) & ((1u << kWays) - 1);
    if (!free) {
      tc->used[set] = 0;
      free = (1u << kWays) - 1;
    }
    way = __builtin_ctz(free);
  }
  Entry& e = tc->e[set * kWays + way];
  if (tc->tags[set][way] != 0 && !e.uncacheable && !e.served)
    ++tc->wasted;
  else if (!s.uncacheable)
    tc->wasted = 0;
  tc->tags[set][way] = 0;
  memcpy(&e, &s, offsetof(Entry, off));
  memcpy(e.off, s.off, sizeof(uint32_t) * s.n_checks);
  memcpy(e.val, s.val, sizeof(uintptr_t) * s.n_checks);
  tc->tags[set][way] = tag;
  tc->used[set] = static_cast<uint16_t>(tc->used[set] | (1u << way));
  return &e;
}

void learn_probe(ThreadCache* tc, uint32_t off) {
  for (uint32_t i = 0; i < tc->n_probes; ++i)
    if (tc->probe[i] == off) return;
  if (tc->n_probes < kProbes)
    tc->probe[tc->n_probes++] = off;
  else
    tc->probe[kProbes - 1] = off;
}

// The unwind without the cache. Its first two frames are itself and the capture function that called it (never
// by a tail call: see plain()), dropped like the capture function's frame in walk(), so both paths return the
// same frames in every build; then cdsa's own frames, when this is libcdsa.so.
__attribute__((noinline)) int plain_backtrace(BacktraceFn bt, uintptr_t* out, int max, bool stop) {
  constexpr int kSlack = 8;
  void* buf[256 + kSlack];
  int want = max + kSlack;
  if (want > static_cast<int>(sizeof buf / sizeof buf[0])) want = sizeof buf / sizeof buf[0];
  int n = bt(buf, want);
  int skip = n < 2 ? n : 2;
  while (skip < n && pc_in_cdsa(reinterpret_cast<uintptr_t>(buf[skip]))) ++skip;
  int count = 0;
  for (int i = skip; i < n && count < max; ++i) {
    // As the step-by-step walk gives it (base/arch.h: unchanged on x86-64; on aarch64 unsigned, and libunwind's
    // return-address-minus-one undone).
    out[count++] = arch::backtrace_pc(reinterpret_cast<uintptr_t>(buf[i]));
    if (stop && pc_in_interpreter(out[count - 1])) break;
  }
  return count;
}

}  // namespace

bool native_stack_init() noexcept {
  load_unwinder();
  // The warming-up thread's cache now (for the main thread, pthread_getattr_np reads /proc/self/maps): its
  // launches then allocate nothing. Other threads map theirs on their first capture.
  if (g_walker_ready.load(std::memory_order_acquire)) thread_cache();
  return g_backtrace.load(std::memory_order_acquire) != nullptr;
}

void self_range_init() noexcept {
  if (!g_self_hi) dl_iterate_phdr(find_self, reinterpret_cast<void*>(&find_self));
}

bool pc_in_cdsa(uintptr_t pc) noexcept { return pc >= g_self_lo && pc < g_self_hi; }

bool set_interpreter_range_from(const void* addr) noexcept {
  if (!addr) return false;
  ObjectQuery q{reinterpret_cast<uintptr_t>(addr), 0, 0};
  if (!dl_iterate_phdr(find_object, &q)) return false;
  g_interp_lo.store(q.lo, std::memory_order_relaxed);
  g_interp_hi.store(q.hi, std::memory_order_release);
  return true;
}

bool pc_in_interpreter(uintptr_t pc) noexcept {
  return pc < g_interp_hi.load(std::memory_order_acquire) && pc >= g_interp_lo.load(std::memory_order_relaxed);
}

int capture_native_stack(uintptr_t* out, int max) noexcept {
  NativeCapture how;
  return capture_native_stack(out, max, &how);
}

int capture_native_stack(uintptr_t* out, int max, NativeCapture* how) noexcept {
  how->hit = false;
  how->memo = nullptr;
  how->token = 0;
  how->frames = out;
  BacktraceFn bt = g_backtrace.load(std::memory_order_acquire);
  if (!bt || max <= 0) return 0;
  if (max > 256) max = 256;
  const bool stop = how->stop_at_interpreter && g_interp_hi.load(std::memory_order_relaxed) != 0;
  ThreadCache* tc = g_walker_ready.load(std::memory_order_acquire) ? thread_cache() : nullptr;
  if (!tc) PLAIN_BACKTRACE(bt, out, max, stop);

  const uint64_t unloads = unload_count();
  // The one capture point: every cached stack starts from this getcontext's registers.
  ucontext_t uc;
  g_walker.getcontext(&uc);
  const auto sp0 = arch::sp_of(uc);
  auto serve = [&](Entry& e, uint32_t set, int way) {
    tc->wasted = 0;
    e.served = 1;
    tc->used[set] = static_cast<uint16_t>(tc->used[set] | (1u << way));
    ++tc->stats.hits;
    how->hit = true;
    how->memo = &e.memo;
    how->token = e.token;
    const uintptr_t* frames = e.val + e.first_out;
    if (how->borrow)
      how->frames = frames;
    else
      memcpy(out, frames, sizeof(uintptr_t) * e.n_out);
    return static_cast<int>(e.n_out);
  };
  if (Entry* e = tc->last) {
    uintptr_t v;
    if (e->sp0 == sp0 && !e->uncacheable && e->subs == unloads && same_key(*e, sp0, e->probe_off, uc, max, stop) &&
        probe_value(tc, sp0, e->probe_off, &v) && v == tc->last_v && checks_hold(*e, sp0)) {
      const auto i = static_cast<uint32_t>(e - tc->e);
      return serve(*e, i / kWays, static_cast<int>(i % kWays));
    }
  }
  bool retry_fill = false;
  for (uint32_t p = 0; p < tc->n_probes; ++p) {
    const uint32_t off = tc->probe[p];
    uintptr_t v;
    if (!probe_value(tc, sp0, off, &v)) continue;
    const uint32_t tag = key_hash(sp0, off, v), set = set_of(tag);
    for (uint32_t m = matching_ways(tc, set, tag); m; m &= m - 1) {
      const int way = __builtin_ctz(m);
      Entry& e = tc->e[set * kWays + way];
      if (!same_key(e, sp0, off, uc, max, stop)) continue;
      if (e.uncacheable) {
        // This place's stack could not be cached last time (signal frame, JIT code, too deep): unwind plainly,
        // and try a fill again now and then.
        if ((++e.retries & 15) != 0) {
          ++tc->stats.plain;
          PLAIN_BACKTRACE(bt, out, max, stop);
        }
        retry_fill = true;
        continue;
      }
      // Every slot lies between this SP and the top of this thread's stack: mapped, and ours.
      if (e.subs != unloads || !checks_hold(e, sp0)) {
        continue;
      }
      tc->last = &e;
      tc->last_v = v;
      return serve(e, set, way);
    }
  }
  // A miss. Filling costs more than a plain unwind: when fills have stopped paying (a thread whose stacks never
  // repeat: 64 fills in a row evicted stacks never served), fill only one miss in 16. A first round over many
  // sites evicts nothing while the cache has room, and is filled.
  if (!retry_fill && tc->wasted >= 64 && (++tc->skipped & 15) != 0) {
    ++tc->stats.plain;
    PLAIN_BACKTRACE(bt, out, max, stop);
  }
  uint32_t probe_off = kNoProbe;
  int n = walk(&uc, out, max, stop, tc, &tc->scratch, unloads, &probe_off);
  learn_probe(tc, probe_off);
  Entry* e = place(tc, tc->scratch, uc);
  if (!e) return n;
  if (e->uncacheable) {
    ++tc->stats.uncacheable;
    return n;
  }
  ++tc->stats.fills;
  tc->last = e;
  if (!probe_value(tc, e->sp0, e->probe_off, &tc->last_v)) tc->last = nullptr;
  how->memo = &e->memo;
  how->token = e->token;
  return n;
}

int capture_native_stack_uncached(uintptr_t* out, int max) noexcept {
  BacktraceFn bt = g_backtrace.load(std::memory_order_acquire);
  if (!bt || max <= 0) return 0;
  PLAIN_BACKTRACE(bt, out, max > 256 ? 256 : max, false);
}

void native_cache_clear() noexcept {
  ThreadCache* tc = ThreadBlock<ThreadCache>::peek();
  if (!tc) return;
  for (Entry& e : tc->e) e.sp0 = 0;
  tc->last = nullptr;
  memset(tc->tags, 0, sizeof tc->tags);
  memset(tc->used, 0, sizeof tc->used);
  tc->wasted = 0;
}

NativeCacheStats native_cache_stats() noexcept {
  const ThreadCache* tc = ThreadBlock<ThreadCache>::peek();
  NativeCacheStats s;
  if (tc) {
    s.hits = tc->stats.hits;
    s.fills = tc->stats.fills;
    s.uncacheable = tc->stats.uncacheable;
    s.plain = tc->stats.plain;
  }
  return s;
}
uint64_t native_cache_bytes_per_thread() noexcept { return sizeof(ThreadCache); }

}  // namespace cdsa
