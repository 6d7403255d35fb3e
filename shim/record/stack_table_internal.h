// The stack table's parts that its other users share: the cell layout (the reclamation reads the Python frames'
// string ids from it), interning a captured stack, and the memo test of the launch path (stack_capture.cc), inline.
// Internal to shim/record/: the recorder's own files include it, nothing else.
// Contract: memo_id_now is the launch path's (lock-free, no allocation); intern_stack may reclaim (recorder.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/record/intern_table_internal.h"
#include "shim/stacks/python_frame_key.h"

// Hidden, as the definitions are (cdsa_preload_flags): an extern declaration would otherwise reach its data through
// the GOT.
#pragma GCC visibility push(hidden)
namespace cdsa::recorder_internal {

// Cell layout of one stack: n_native PCs, then n_python PyFrameKeys (2 words each, byte for byte as captured),
// then n_python resolved frames (file << 32 | function, line).
constexpr int kPyKeyWords = 2, kPyTextWords = 2;
static_assert(sizeof(PyFrameKey) == kPyKeyWords * sizeof(uint64_t), "PyFrameKey is stored as two words");

// What a Python frame key reads as when its stack is first interned: file, function and line, into the buffers
// (resolve_python_frame's signature, shim/stacks/python_stack.h; false: not readable). The table calls no walker
// itself: the capture hands it this.
using PyFrameText = bool (*)(const PyFrameKey& key, char* file, size_t file_cap, char* function, size_t function_cap,
                             int* line) noexcept;
// The id of the stack (pcs, py), interned now if no live entry holds it (its Python frames' text read by `text`);
// kUnknownStack when the table is full of entries in use.
uint32_t intern_stack(const uintptr_t* pcs, int n_native, const PyFrameKey* py, int n_py, PyFrameText text);

// memo_entry for the launch path (capture_and_intern_stack, after its g_ready test), inline: the same tests in the
// same order (the memo's age, the id's slot and tag, the touch before the state's seq_cst load, live and not busy
// under the same tag), without live_entry's call, its out-parameters or a second g_ready load (set once, never
// cleared). The id returned is "used now", as from memo_entry.
__attribute__((always_inline)) inline uint32_t memo_id_ready(StackMemo memo) {
  if (memo == kNoStackMemo) return kUnknownStack;
  const uint64_t now = g_epoch.load(std::memory_order_relaxed);
  if (static_cast<uint32_t>(now) - static_cast<uint32_t>(memo >> 32) + 1 >= g_stacks.tag_limit) return kUnknownStack;
  const auto id = static_cast<uint32_t>(memo);
  uint32_t slot, tag;
  if (!g_stacks.decode(id, &slot, &tag)) return kUnknownStack;
  EntryMeta& e = g_stacks.entries[slot];
  const uint64_t st = touch_entry(e);
  return (st & (kLive | kBusy)) == kLive && (st & kTagMask) == tag ? id : kUnknownStack;
}
// memo_id_ready, and the memo made new when it answers: a memo made in the current epoch names an entry this thread
// touched in it, which no reclamation can take before the epoch moves on (every reclamation moves it first, then
// keeps what was touched in the epoch before), so it is the id without another look while the epoch stays. A memo
// made anew ages from then: the entry had the same generation then, and a generation comes back only after
// tag_limit reclamations from there.
__attribute__((always_inline)) inline uint32_t memo_id_now(StackMemo* memo) {
  const StackMemo m = *memo;
  const uint64_t now = g_epoch.load(std::memory_order_relaxed);
  if (static_cast<uint32_t>(m >> 32) == static_cast<uint32_t>(now)) return static_cast<uint32_t>(m);  // (epoch >= 2)
  const uint32_t id = memo_id_ready(m);  // touches the entry (in `now` or a later epoch)
  if (id != kUnknownStack) *memo = (now << 32) | id;
  return id;
}

}  // namespace cdsa::recorder_internal
#pragma GCC visibility pop
