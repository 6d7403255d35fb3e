#include "shim/record/stream_order.h"

namespace cdsa {
namespace stream_order_internal {

__thread ThreadRegion tl_region __attribute__((tls_model("initial-exec"))) = {nullptr, 0, false};

void exit_region(StreamState* st, uint32_t entries, bool overlap) noexcept {
  uint64_t cur = st->regions.load(std::memory_order_acquire);
  bool raised = false;
  for (;;) {
    // Another region open now, or one that began (and maybe ended) since this one did: they overlapped.
    const bool others = static_cast<uint32_t>(cur) > 1 || static_cast<uint32_t>(cur >> 32) != entries + 1;
    // Before the exit, so that a snapshot that sees this region gone sees the raise too; `launched` read after this
    // region's own record is at least its own launch's number.
    if ((overlap || others) && !raised) {
      raise_to(st->raced_to, st->launched.load(std::memory_order_acquire) + 1);
      raised = true;
    }
    // The exit is decided on the very value it replaces: a region that begins after it reads it.
    if (st->regions.compare_exchange_weak(cur, cur - 1, std::memory_order_acq_rel, std::memory_order_acquire)) return;
  }
}

}  // namespace stream_order_internal
}  // namespace cdsa
