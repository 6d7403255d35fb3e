// The verified chain cache of the CPython walker (python_stack.h: capture_python_frames_cached).
#include <cstring>
#include <type_traits>

#include "base/arch.h"
#include "shim/common/thread_block.h"
#include "shim/stacks/code_frees.h"
#include "shim/stacks/python_walker_internal.h"

namespace cdsa {
// The verified chain cache (see python_stack.h).
//
// Why a verified chain is exact: the walk reads, for each frame it visits, the owner byte, the code / executable word
// and the instruction pointer (3.10: f_lasti), then (for a frame that is not hidden by its owner) the code object's
// type and, for a code object, its immutable fields (co_firstlineno, co_filename, co_qualname, co_linetable,
// _co_firsttraceable, co_code_adaptive's offset); and the frame's link to go on. Its result is a function of those
// words and of where the chain ends. The check reads the same words along the live links (a frame is read only once
// the link that leads to it is the one the walk read, and every frame on the thread's chain is alive: the thread is
// in native code, so the chain cannot change under us) and compares them with the walk's; the last link must be null
// again where the chain ended there. The code objects' fields are guarded by the identity words: the frame holds a
// strong reference to its code object, so the object at an unchanged address is either the same object (immutable
// fields) or another object allocated where a freed one was, which is still a code object with the same four words
// only if CPython put new strings and a new line table at the old ones' addresses too. The same check serves in
// every version: the words' offsets come from the layout (3.10: frame objects, no owner; 3.11/3.12: built-in;
// 3.13/3.14: debug offsets; 3.14's tagged f_executable: tag bits cleared before the code object is read, compared
// with them); nothing in it depends on the version beyond the Reader's offsets.
//
// Two shortcuts, both resting on the count of code objects freed (g_code_frees, code_frees.h; a chain remembers the
// count at which
// its guards last held):
//  * While the count is unchanged, no code object was freed, so every code object the chain's frames held when the
//    guards last held is still alive, the same object: an unchanged code word names it, and its guards hold without
//    being read.
//  * By instruction (3.11+, a chain whose frames all have by_instr): then the code words and owner bytes are not
//    compared either, only the links and instruction pointers. A 3.11+ frame's instruction pointer lies inside its
//    own code object (co_code_adaptive, or two bytes before it in a 3.11/3.12 frame that has not started), except an
//    entry frame's (3.12: the interpreter's trampoline code object, 3.13/3.14: the static
//    _Py_INTERPRETER_TRAMPOLINE_INSTRUCTIONS; their ceval.c sets it, with owner FRAME_OWNED_BY_CSTACK (3.12, 3.13) or
//    FRAME_OWNED_BY_INTERPRETER (3.14), the owners cdsa hides, and no other frame gets those owners). Live objects do
//    not overlap, so an unchanged instruction pointer of a frame whose code object is still alive (the count) means
//    the same code object, and an entry frame's means an entry frame again. The owner byte decides nothing else for
//    a frame the walk showed at or past its first traceable instruction (by_instr: only an incomplete frame, before
//    it, depends on the owner being a generator or not); frames the walk found incomplete, or with an executable
//    that is not a code object, keep the chain on the full check. 3.10 (an instruction index, not a pointer) always
//    compares the words.
namespace {

using namespace pystack;

constexpr int kChainFrames = 48;  // frames visited per cached chain
constexpr int kChainWays = 16, kChainSets = 32;  // 512 chains

enum : uint8_t { kHidden = 0, kNotCode = 1, kShown = 2, kIncomplete = 3 };
// What the walk read of one visited frame, in two parts: the words the check compares (in one pass, with no
// branch but the one on their difference), and what the walk made of them (used again only by a partial re-walk).
struct ChainWords {
  uintptr_t next;       // its link (previous / f_back) as the walk read it; 0 at the chain's end
  uintptr_t code_word;  // f_code / f_executable
  uintptr_t instr;      // the instruction pointer (3.11+) or f_lasti (3.10)
  uint64_t owner;       // its owner byte (3.10: 0)
};
static_assert(sizeof(ChainWords) == 32 && kChainFrames < 256, "four words per frame");
struct ChainMeta {
  uint8_t kind;        // what the walk made of it
  uint8_t by_instr;    // its instruction pointer alone says what the walk made of it (see verified_prefix_t)
  uint8_t guard;       // its code object is checked (not hidden, and not the same code as the frame before)
  uint8_t out_before;  // frames shown before this one
  uint32_t check;      // the code object's fingerprint (kNotCode / kHidden: 0)
};
// A guarded frame: its code object (tag bits cleared) and the identity words the fingerprint is made of, folded into
// one 64-bit value (ident(): the fingerprint is a function of it, so an equal ident is an equal fingerprint).
struct ChainGuard {
  const char* code;  // kNotCode: the word as read, tag bits cleared (may be null)
  uint64_t ident;    // kNotCode: 0
  uint8_t index;     // the frame's index in the chain
  uint8_t not_code;  // the walk found no code object there
};
struct Chain {
  uint64_t token;
  PyMemo memo;
  uintptr_t head;  // the innermost frame's address
  uint32_t succ;   // the chain served right after this one the last time (index + 1; 0: none)
  uint64_t frees;  // code_frees_now() when its code objects' guards last held
  int32_t max;
  uint16_t n_visited, n_out;
  uint8_t ends_null, truncated, n_guards, n_code_guards;  // guards: the n_code_guards code objects first
  uint8_t by_instr;  // every visited frame's is (m[i].by_instr)
  ChainWords w[kChainFrames];
  ChainMeta m[kChainFrames];
  ChainGuard g[kChainFrames];
  PyFrameKey keys[kChainFrames];
};
struct ChainCache {
  uint64_t tokens;
  uint32_t last;  // the chain served or filled last (index + 1 in c; 0: none)
  PyChainStats stats;
  alignas(16) uint32_t tags[kChainSets][kChainWays];
  uint16_t used[kChainSets];
  Chain scratch;
  Chain c[kChainSets * kChainWays];
};
static_assert(std::is_trivially_default_constructible_v<ChainCache>, "mapped zeroed");

inline uint32_t chain_tag(uintptr_t frame, uintptr_t code_word, uintptr_t instr, int max) {
  uint64_t h = (frame ^ (code_word * 0x9e3779b97f4a7c15ull) ^ (instr << 17) ^ static_cast<uint64_t>(max)) *
               0xff51afd7ed558ccdull;
  uint32_t t = static_cast<uint32_t>(h >> 32);
  return t ? t : 1;
}

// The walk's reads of one frame, shared by the walk that fills a chain and the check.
struct Reader {
  int32_t o_previous, o_owner, o_code, o_instr, o_ob_type, o_adaptive, o_firsttraceable;
  int owner_skip_min, owner_generator;
  bool hidden_by_instr;  // a hidden frame is an entry frame, known by its instruction (verified_prefix_t)
  uintptr_t tag_mask;
  const void* code_type;
  FpOffsets fo;
  bool objects;  // 3.10: frame objects, f_lasti, no owner

  Reader() = default;
  explicit Reader(const Runtime& R) {
    const PyLayout& L = R.L;
    objects = L.tstate_frame >= 0;
    o_previous = L.frame_previous;
    o_code = L.frame_code;
    o_ob_type = L.ob_type;
    code_type = R.code_type;
    fo = fp_offsets(L);
    // 3.10's frame objects have f_lasti, no owner, no incomplete frames and no tagged code word.
    o_instr = objects ? L.frame_lasti : L.frame_instr;
    o_owner = objects ? -1 : L.frame_owner;
    o_adaptive = objects ? 0 : L.code_adaptive;
    o_firsttraceable = objects ? 0 : L.code_firsttraceable;
    owner_skip_min = objects ? 1 << 30 : L.owner_skip_min;
    owner_generator = objects ? -1 : L.owner_generator;
    hidden_by_instr = !objects && L.minor >= 12 && L.minor <= 14;  // checked against their ceval.c (verified_prefix_t)
    tag_mask = objects ? ~uintptr_t(0) : ~uintptr_t(L.code_tag_mask);
  }
  uintptr_t code_word(const char* frame) const { return load<uintptr_t>(frame + o_code); }
  uintptr_t instr(const char* frame) const {
    return objects ? static_cast<uintptr_t>(static_cast<uint32_t>(load<int32_t>(frame + o_instr)))
                   : load<uintptr_t>(frame + o_instr);
  }
  uint8_t owner(const char* frame) const { return objects ? 0 : static_cast<uint8_t>(frame[o_owner]); }
};

Reader g_reader;  // made once by detect(), before the walker is Ready
}  // namespace

namespace pystack {
void make_reader(const Runtime& R) { g_reader = Reader(R); }
}  // namespace pystack

namespace {

const char* head_frame(const Runtime& R, const char* ts) {
  const PyLayout& L = R.L;
  if (L.tstate_frame >= 0) return load<const char*>(ts + L.tstate_frame);
  if (L.tstate_cframe >= 0) {
    const auto* cframe = load<const char*>(ts + L.tstate_cframe);
    return cframe ? load<const char*>(cframe + L.cframe_current_frame) : nullptr;
  }
  return load<const char*>(ts + L.tstate_current_frame);
}

// The walk of capture_python_frames from `frame`, with `n` frames already in out and `v` frames visited, recording
// every visited frame into c (c->n_visited = 0xffff when the chain does not fit: not to be kept). Each frame's link
// is recorded too, also where the walk stops at that frame (truncated): a live frame's field.
int walk_chain(const Reader& rd, const char* frame, int v, int n, PyFrameKey* out, int max, Chain* c,
               bool* truncated) {
  bool fits = true;
  uintptr_t prev_code = v > 0 ? c->w[v - 1].code_word : 0;
  uint8_t prev_kind = v > 0 ? c->m[v - 1].kind : uint8_t{kHidden};
  bool ended_null = true;
  for (int guard = kMaxWalk; frame && guard > 0; --guard) {
    ChainWords cf{};
    ChainMeta cm{};
    cf.next = load<uintptr_t>(frame + rd.o_previous);
    cf.owner = rd.owner(frame);
    cf.code_word = rd.code_word(frame);
    cf.instr = rd.instr(frame);
    cm.out_before = static_cast<uint8_t>(n);
    const int owner = static_cast<signed char>(cf.owner);
    bool shown = false;
    const auto* code = reinterpret_cast<const char*>(cf.code_word & rd.tag_mask);
    if (!rd.objects && owner >= rd.owner_skip_min) {
      cm.kind = kHidden;  // C-stack / interpreter frames
      cm.by_instr = rd.hidden_by_instr;
    } else if (!code || load<const void*>(code + rd.o_ob_type) != rd.code_type) {
      cm.kind = kNotCode;
    } else {
      cm.check = fingerprint(rd.fo, code);
      const int32_t off = rd.objects ? static_cast<int32_t>(cf.instr) * 2
                                     : int32_t(reinterpret_cast<const char*>(cf.instr) - (code + rd.o_adaptive));
      if (!rd.objects && owner != rd.owner_generator &&
          off < int32_t(load<int32_t>(code + rd.o_firsttraceable)) * 2) {
        cm.kind = kIncomplete;
      } else {
        cm.kind = kShown;
        cm.by_instr = !rd.objects && off >= int32_t(load<int32_t>(code + rd.o_firsttraceable)) * 2;
        shown = true;
        if (n == max) {
          if (truncated) *truncated = true;
          ended_null = false;
        } else {
          out[n].code = code;
          out[n].instr_offset = off;
          out[n].code_check = cm.check;
        }
      }
    }
    // A frame with the code object of the frame before it (recursion) is guarded there: the same object.
    const bool same_code = v > 0 && cf.code_word == prev_code && (prev_kind == kShown || prev_kind == kIncomplete) &&
                           (cm.kind == kShown || cm.kind == kIncomplete);
    cm.guard = cm.kind != kHidden && !same_code;
    if (v < kChainFrames) {
      c->w[v] = cf;
      c->m[v] = cm;
    } else {
      fits = false;
    }
    ++v;
    prev_code = cf.code_word;
    prev_kind = cm.kind;
    if (shown) {
      if (!ended_null) break;
      ++n;
    }
    frame = reinterpret_cast<const char*>(cf.next);
  }
  if (frame && ended_null) fits = false;  // stopped by the cycle guard
  c->n_visited = fits ? static_cast<uint16_t>(v) : 0xffff;
  c->n_out = static_cast<uint16_t>(n);
  c->ends_null = ended_null;
  c->truncated = !ended_null;
  c->max = max;
  return n;
}

// The guards of a walked chain (every frame it flags), in frame order: its code object's ident, or none.
void set_guards(const Reader& rd, Chain* c) {
  int k = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the code objects first, then the frames without one
    for (int i = 0; i < c->n_visited; ++i) {
      if (!c->m[i].guard || (c->m[i].kind == kNotCode) != (pass == 1)) continue;
      ChainGuard& g = c->g[k++];
      g.index = static_cast<uint8_t>(i);
      g.not_code = pass == 1;
      g.code = reinterpret_cast<const char*>(c->w[i].code_word & rd.tag_mask);
      g.ident = g.not_code ? 0 : ident(rd.fo, g.code);
    }
    if (pass == 0) c->n_code_guards = static_cast<uint8_t>(k);
  }
  c->n_guards = static_cast<uint8_t>(k);
  c->by_instr = 1;
  for (int i = 0; i < c->n_visited; ++i) c->by_instr &= c->m[i].by_instr;
}

// How many of c's visited frames still hold what the walk read, from `frame` (its head) on; *stop_at: the first
// frame not verified (nullptr past the end of a chain that ended there); *hit: every frame verified.
//
// First pass, the words: frame i is read only once frame i - 1's link was found equal to what the walk read (so
// every frame read is on the thread's live chain, and a chain that ended at a null link ends there again). Its code
// word, instruction, owner and link are compared with one branch on their difference. Second pass, the guards
// (frames whose code object the walk read: not hidden, not the same code word as a guarded frame just before):
// still a code object with the same identity words, or still no code object. The code objects' guards are skipped
// while no code object was freed since they last held (frees == c.frees, counted by counting_code_dealloc): a
// frame's code word, unchanged, then names the object the guard read. A failed guard at frame g leaves the frames
// before g verified.
template <bool kObjects>
__attribute__((always_inline)) inline int verified_prefix_t(const Reader& rd, const Chain& c, const char* frame,
                                                            uint64_t frees, const char** stop_at, bool* hit) {
  const int32_t o_code = rd.o_code, o_instr = rd.o_instr, o_owner = rd.o_owner, o_previous = rd.o_previous;
  const ChainWords* const first = c.w;
  const ChainWords* const end = first + c.n_visited;
  const ChainWords* f = first;
  const char* at = frame;
  // Whether frame `at` still holds what f records; *next: its link.
  const auto differs = [&](const ChainWords* w, const char** next) {
    const uintptr_t link = load<uintptr_t>(at + o_previous);
    uintptr_t diff = (link ^ w->next) | (load<uintptr_t>(at + o_code) ^ w->code_word);
    if constexpr (kObjects) {
      diff |= static_cast<uint32_t>(load<int32_t>(at + o_instr)) ^ w->instr;
    } else {
      diff |= (load<uintptr_t>(at + o_instr) ^ w->instr) | (static_cast<uint8_t>(at[o_owner]) ^ w->owner);
    }
    *next = reinterpret_cast<const char*>(link);
    return diff != 0;
  };
  const char* next;
  const ChainWords* const pairs_end = first + (c.n_visited & ~1u);
  for (; f != pairs_end; f += 2) {  // two frames a round (one pointer compare a round)
    if (differs(f, &next)) goto words_done;
    at = next;
    if (differs(f + 1, &next)) {
      ++f;
      goto words_done;
    }
    at = next;
  }
  if (f != end && !differs(f, &next)) {
    ++f;
    at = next;
  }
words_done:
  int k = static_cast<int>(f - first);
  const int32_t o_ob_type = rd.o_ob_type;
  const void* const code_type = rd.code_type;
  const FpOffsets fo = rd.fo;
  const auto holds = [&](const ChainGuard* g) {
    const char* code = g->code;
    return g->not_code ? !code || load<const void*>(code + o_ob_type) != code_type
                       : load<const void*>(code + o_ob_type) == code_type && ident(fo, code) == g->ident;
  };
  const ChainGuard* g = c.g;
  const ChainGuard* const g_code_end = g + c.n_code_guards;
  const ChainGuard* const g_end = g + c.n_guards;
  if (f == end) {  // every frame's words hold (a hit if the guards do): no index to compare, no kind to test
    if (frees != c.frees) {  // (never equal while uncounted: remembered())
      for (; g != g_code_end; ++g)
        if (load<const void*>(g->code + o_ob_type) != code_type || ident(fo, g->code) != g->ident) goto guards_slow;
    }
    for (g = g_code_end; g != g_end; ++g)
      if (g->code && load<const void*>(g->code + o_ob_type) == code_type) goto guards_slow;
    *stop_at = at;
    *hit = true;
    return k;
  }
guards_slow:
  *hit = false;
  // The first failing guard among the frames verified so far ends the prefix there.
  for (g = c.g; g != g_end; ++g) {
    if (g->index < k && !holds(g)) {
      k = g->index;
      at = k == 0 ? frame : reinterpret_cast<const char*>(c.w[k - 1].next);
    }
  }
  *stop_at = at;
  return k;
}
// Whether chain c may be checked by instruction now: all its frames allow it, and no code object was freed since its
// guards held (never on 3.10, whose frames never allow it; never while frees are uncounted: remembered()).
inline bool by_instr_now(const Chain& c, uint64_t frees) { return c.by_instr && frees == c.frees; }

// Whether every visited frame of a chain checked by instruction (by_instr_now) still has the link and instruction
// pointer the walk read: then it is a hit ("Two shortcuts" above). No prefix, no stop: a miss is checked again in
// full by verified_prefix_t, which finds the prefix to walk on from.
__attribute__((always_inline)) inline bool holds_by_instr(const Reader& rd, const Chain& c, const char* at) {
  const int32_t o_instr = rd.o_instr, o_previous = rd.o_previous;
  const ChainWords* f = c.w;
  const ChainWords* const end = f + c.n_visited;
  const ChainWords* const pairs_end = f + (c.n_visited & ~1u);
  // Two frames a round; each frame read only after the link to it held. Two compares a frame, each against the
  // cached word in memory (a load and a compare-with-memory each, no copy of the link).
  for (; f != pairs_end; f += 2) {
    const uintptr_t link = load<uintptr_t>(at + o_previous);
    if (link != f->next || load<uintptr_t>(at + o_instr) != f->instr) return false;
    at = reinterpret_cast<const char*>(link);
    const uintptr_t link2 = load<uintptr_t>(at + o_previous);
    if (link2 != f[1].next || load<uintptr_t>(at + o_instr) != f[1].instr) return false;
    at = reinterpret_cast<const char*>(link2);
  }
  return f == end || (load<uintptr_t>(at + o_previous) == f->next && load<uintptr_t>(at + o_instr) == f->instr);
}

inline int verified_prefix(const Reader& rd, const Chain& c, const char* frame, uint64_t frees, const char** stop_at,
                           bool* hit, PyChainStats* stats) {
  if (by_instr_now(c, frees) && holds_by_instr(rd, c, frame)) {
    *stop_at = nullptr;  // (a hit: not walked on from)
    *hit = true;
    return c.n_visited;
  }
  ++stats->word_checks;
  return rd.objects ? verified_prefix_t<true>(rd, c, frame, frees, stop_at, hit)
                    : verified_prefix_t<false>(rd, c, frame, frees, stop_at, hit);
}

static_assert(kChainWays == 16, "arch::match_16_tags compares one set's tags at once");
inline uint32_t chain_ways(const ChainCache* cc, uint32_t set, uint32_t tag) {
  return arch::match_16_tags(cc->tags[set], tag);
}

}  // namespace

namespace {

// Serves chain `index` (every frame verified): its keys, memo and token, and it becomes the last chain served.
// Its code objects' guards held at `frees` (checked, or skipped as unchanged since they last held).
// `predicted`: it is the last chain's successor already.
inline int serve_chain(ChainCache* cc, uint32_t index, uint64_t frees, PyFrameKey* out, PyCapture* how,
                       bool predicted = false) {
  Chain& c = cc->c[index];
  c.frees = remembered(frees);
  ++cc->stats.hits;
  cc->used[index / kChainWays] = static_cast<uint16_t>(cc->used[index / kChainWays] | (1u << (index % kChainWays)));
  if (!predicted && cc->last) cc->c[cc->last - 1].succ = index + 1;
  cc->last = index + 1;
  how->hit = true;
  how->truncated = c.truncated;
  how->memo = &c.memo;
  how->token = c.token;
  if (how->borrow)
    how->frames = c.keys;
  else
    memcpy(out, c.keys, sizeof(PyFrameKey) * c.n_out);
  return static_cast<int>(c.n_out);
}

// What follows when the chain tried first is not the live one: the chains found by the innermost frame's words,
// else a walk from the first frame that differs into a new chain. Out of line: the launch path's hit stays small.
[[gnu::noinline]] int capture_chain_miss(const Reader& rd, ChainCache* cc, const char* head, uint64_t frees,
                                         PyFrameKey* out, int max, PyCapture* how) {
  check_dealloc_slot();
  frees = code_frees_now();  // read again (before any code object below): uncounted from now on if the slot changed
  const char* stop_at = nullptr;
  const uint32_t tag = chain_tag(reinterpret_cast<uintptr_t>(head), rd.code_word(head), rd.instr(head), max);
  const uint32_t set = tag & (kChainSets - 1);
  const Chain* best = nullptr;
  int best_n = 0;
  const char* best_stop = nullptr;
  for (uint32_t m = chain_ways(cc, set, tag); m; m &= m - 1) {
    const uint32_t way = static_cast<uint32_t>(__builtin_ctz(m));
    Chain& c = cc->c[set * kChainWays + way];
    if (c.max != max) continue;
    bool hit;
    const int k = verified_prefix(rd, c, head, frees, &stop_at, &hit, &cc->stats);
    if (hit) return serve_chain(cc, set * kChainWays + way, frees, out, how);
    if (k > best_n) {
      best = &c;
      best_n = k;
      best_stop = stop_at;
    }
  }
  // A miss: walk on from the first frame that differs (from the head when none matched), into the scratch chain.
  Chain& s = cc->scratch;
  int n = 0;
  const char* from = head;
  if (best) {
    ++cc->stats.partial;
    memcpy(s.w, best->w, sizeof(ChainWords) * static_cast<size_t>(best_n));
    memcpy(s.m, best->m, sizeof(ChainMeta) * static_cast<size_t>(best_n));
    n = best->m[best_n - 1].out_before + (best->m[best_n - 1].kind == kShown ? 1 : 0);
    memcpy(out, best->keys, sizeof(PyFrameKey) * static_cast<size_t>(n));
    from = best_stop;
  }
  n = walk_chain(rd, from, best ? best_n : 0, n, out, max, &s, &how->truncated);
  if (s.n_visited == 0xffff || s.n_visited == 0) {
    ++cc->stats.plain;
    return n;
  }
  ++cc->stats.fills;
  // Into a way not recently used.
  uint32_t free = ~static_cast<uint32_t>(cc->used[set]) & ((1u << kChainWays) - 1);
  if (!free) {
    cc->used[set] = 0;
    free = (1u << kChainWays) - 1;
  }
  const int way = __builtin_ctz(free);
  Chain& c = cc->c[set * kChainWays + way];
  cc->tags[set][way] = 0;
  c.token = ++cc->tokens;
  c.frees = remembered(frees);  // read before the walk read the code objects
  c.memo = PyMemo{};
  c.head = reinterpret_cast<uintptr_t>(head);
  c.max = s.max;
  c.n_visited = s.n_visited;
  c.n_out = s.n_out;
  c.ends_null = s.ends_null;
  c.truncated = s.truncated;
  memcpy(c.w, s.w, sizeof(ChainWords) * s.n_visited);
  memcpy(c.m, s.m, sizeof(ChainMeta) * s.n_visited);
  set_guards(rd, &c);
  memcpy(c.keys, out, sizeof(PyFrameKey) * static_cast<size_t>(n));
  cc->tags[set][way] = tag;
  cc->used[set] = static_cast<uint16_t>(cc->used[set] | (1u << way));
  c.succ = 0;
  if (cc->last) cc->c[cc->last - 1].succ = static_cast<uint32_t>(set * kChainWays + way) + 1;
  cc->last = static_cast<uint32_t>(set * kChainWays + way) + 1;
  how->memo = &c.memo;
  how->token = c.token;
  return n;
}


}  // namespace

int capture_python_frames_cached(PyFrameKey* out, int max, PyCapture* how) noexcept {
  how->hit = false;
  how->truncated = false;
  how->memo = nullptr;
  how->token = 0;
  how->frames = out;
  if (!out || max <= 0 || !ready()) return 0;
  const Runtime& R = g_rt;
  const auto* ts = static_cast<const char*>(R.this_thread_state());
  if (!ts) return 0;
  ChainCache* cc = ThreadBlock<ChainCache>::get();
  if (!cc) return capture_python_frames(out, max, &how->truncated);
  const Reader& rd = g_reader;
  const char* head = head_frame(R, ts);
  if (!head) return 0;
  const uint64_t frees = code_frees_now();  // before any code object's words are read
  // First the chain that followed the last one served, the last time it was served: the same stack again (launches
  // from one C call, a loop), or sites called in a repeating order (an op-by-op forward pass), without the tag and
  // the set's scan. Any chain verified against the live frames is exact; a cleared cache has no successors.
  if (const uint32_t pred = cc->last ? cc->c[cc->last - 1].succ : 0) {
    const Chain& c = cc->c[pred - 1];
    if (c.max == max) {
      bool hit;
      if (by_instr_now(c, frees)) {
        hit = holds_by_instr(rd, c, head);  // inline, and no full check after a miss: it could not hit either
      } else {
        const char* stop_at;
        verified_prefix(rd, c, head, frees, &stop_at, &hit, &cc->stats);
      }
      if (hit) {
        ++cc->stats.predicted;
        return serve_chain(cc, pred - 1, frees, out, how, true);
      }
    }
  }
  return capture_chain_miss(rd, cc, head, frees, out, max, how);
}

void python_chain_cache_clear() noexcept {
  ChainCache* cc = ThreadBlock<ChainCache>::peek();
  if (!cc) return;
  memset(cc->tags, 0, sizeof cc->tags);
  memset(cc->used, 0, sizeof cc->used);
  cc->last = 0;
  for (Chain& c : cc->c) c.succ = 0;
}

PyChainStats python_chain_stats() noexcept {
  const ChainCache* cc = ThreadBlock<ChainCache>::peek();
  return cc ? cc->stats : PyChainStats{};
}

}  // namespace cdsa
