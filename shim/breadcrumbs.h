// Breadcrumbs: stream-ordered completion marks in host memory that cdsa owns.
//
// After each successful launch on a stream, cdsa enqueues on that stream a
// cuStreamWriteValue64 of the launch's per-stream number into the stream's
// slot. The write is ordered after the kernel, so after a fault the slot names
// the last launch that finished on that stream; the next one is the first
// unfinished launch. Reading a slot is a plain load: no CUDA call, so it works
// on a dead context.
//
// Contract: `breadcrumbs_init` maps and registers the slots (needs a current
// context; call on the launch path, it runs its body once and retries after a
// failure caused by stream capture). `enqueue_breadcrumb` is lock-free and
// allocation-free. Slots: one per StreamTable entry. Both make driver calls of
// cdsa's own, so they run under the reentrancy guard (shim/reentrancy.h).
#pragma once

#include <cuda.h>
#include <cstdint>

#include "shim/reentrancy.h"

namespace cdsa {

bool breadcrumbs_init(const InCdsa&) noexcept;
bool breadcrumbs_active() noexcept;
// Enqueues the mark; returns the driver's result (CUDA_SUCCESS when disabled).
CUresult enqueue_breadcrumb(const InCdsa&, CUstream stream, int slot, uint64_t stream_seq) noexcept;
uint64_t breadcrumb_landed(int slot) noexcept;

}  // namespace cdsa
