// Native call stacks of the calling thread, through libunwind loaded at run time.
//
// Contract: `native_stack_init()` dlopens libunwind.so.8 with RTLD_LOCAL (never a
// link dependency: a linked libunwind would rebind the host's C++ exception
// unwinding) and turns on its per-thread cache; idempotent and thread-safe, call
// it during warm-up. `capture_native_stack` is then lock-free and allocation-free
// (after libunwind's own per-thread cache is built) and returns return
// addresses, innermost first, with cdsa's own frames removed. Without
// libunwind it returns 0 and one notice is printed.
#pragma once

#include <cstdint>

namespace cdsa {

bool native_stack_init() noexcept;
int capture_native_stack(uintptr_t* out, int max) noexcept;
// Finds libcdsa.so's own address range (constructor; cheap).
void self_range_init() noexcept;
// True if `pc` lies inside libcdsa.so itself.
bool pc_in_cdsa(uintptr_t pc) noexcept;

}  // namespace cdsa
