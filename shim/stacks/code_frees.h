// The one write cdsa makes into the interpreter: a counting wrapper in PyCode_Type's tp_dealloc slot, so that the
// Python chain cache (python_chain_cache.cc) knows whether any code object was freed since it last read one.
//
// Every code object's deallocation goes through that slot (_Py_Dealloc calls the type's slot). The wrapper adds one
// to a count, then calls the function it found in the slot (the interpreter's own, or what another layer put there
// before cdsa), which frees the object. A verified chain remembers the count at which its code objects' identity
// words were last read: while the count is unchanged, no code object was freed since, so a frame's unchanged code
// word still names the very object read then (python_chain_cache.cc, "Why a verified chain is exact").
//
// Contract:
//   * count_code_frees() runs once, from the walker's detection (python_stack.cc, under its one-time mutex), before
//     the walker is Ready. It writes the slot only where PyCode_Type is writable data (a PT_LOAD segment with PF_W,
//     outside PT_GNU_RELRO: every CPython build seen) and the slot holds a function; with one compare-and-swap, so
//     a layer changing the slot at the same moment leaves it as that layer made it. Nothing else in the
//     interpreter is written, ever, and the wrapper is never taken out (the count may run for the whole process).
//   * The wrapper allocates nothing, takes no lock and touches no reference count: one atomic add, one call.
//   * code_frees_now() is one acquire load: kUncounted when frees are not counted (no wrapper in the slot, or
//     another layer put its own function in the slot after cdsa's: check_dealloc_slot finds that, and from then on
//     the frees stay uncounted for good). Lock-free; safe on the launch path.
#pragma once

#include <atomic>
#include <cstdint>

#pragma GCC visibility push(hidden)
namespace cdsa::pystack {

constexpr uint64_t kUncounted = ~uint64_t{0};

// Puts the counting wrapper in the tp_dealloc slot at `tp_dealloc_offset` in the type object `code_type`
// (&PyCode_Type; the layout's type_dealloc), where that is writable data; else the frees stay uncounted and every
// verified chain reads its code objects' identity words again at each capture.
void count_code_frees(const void* code_type, int32_t tp_dealloc_offset) noexcept;

// Whether another layer has put its own function into the slot after cdsa's wrapper. A layer that wraps the slot
// calls on what it found there, as cdsa's wrapper does, and the count stays right; one that does not would leave frees
// uncounted, so once the slot is found changed the frees stay uncounted for good. Checked where a chain is filled or
// fully checked (a miss), not on the launch path's hit.
void check_dealloc_slot() noexcept;

// Code objects freed since the walker counted them (kUncounted: not counted); counts start at 1.
extern std::atomic<uint64_t> g_code_frees;
inline uint64_t code_frees_now() noexcept { return g_code_frees.load(std::memory_order_acquire); }
// What a chain remembers of a count: never kUncounted (0 then, which no count is: counts start at 1), so an
// uncounted capture never matches it.
inline uint64_t remembered(uint64_t frees) noexcept { return frees == kUncounted ? 0 : frees; }

}  // namespace cdsa::pystack
#pragma GCC visibility pop
