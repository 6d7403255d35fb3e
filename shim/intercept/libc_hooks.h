// The libc functions libcdsa.so interposes, one table for all (libc_hooks.def): stdio and write, so that the
// device's assert text libcuda prints is captured (shim/record/assert_capture.h), dlclose, so that the native
// stack cache learns of unloads (shim/stacks/native_stack.h), and dlsym/dlvsym (dl_hooks.cc), so that lookups of
// driver symbols get cdsa's wrappers.
//
// Every hook forwards each call unchanged to the *next* definition of its name (libc's, or another interposer's
// loaded after cdsa: next_libc, shim/common/libc_symbols.h), so the program's bytes and results are what they would
// be without cdsa. The stdio and write hooks' next definitions are found once, in libcdsa.so's constructor
// (prepare_libc_hooks); outside a driver call such a hook is one thread-local test and a jump.
//
// Under RTLD_DEEPBIND (or any binding that gives libcuda libc's stdio past the global scope) libcuda's own imports
// would miss the hooks: bind_driver_stdio, run once when cdsa starts, points libcuda's GOT entries for these
// functions that hold libc's definition, or are not bound yet, at what the global scope resolves them to (cdsa's
// hooks, or an interposer before cdsa that forwards to them), as a plain load would have bound them (driver_stdio.cc).
// (A dlmopen namespace has its own libc: out of scope.)
//
// Contract: the hooks are async-signal-safe where the functions they forward to are, allocate nothing and take no
// lock of cdsa's outside a driver call; prepare_libc_hooks is the constructor's (no sanitizer runtime needed: it
// calls the libc lookup of libc_symbols.h).
#pragma once

#include <cstddef>

namespace cdsa {

// The constructor's part: looks up the next definition of every stdio and write hook (libc_hooks.def's
// CDSA_LIBC_HOOK rows).
void prepare_libc_hooks() noexcept;

// The names of the stdio and write hooks (libc_hooks.def's CDSA_LIBC_HOOK and CDSA_LIBC_HOOK_VIA rows), in the
// table's order: what bind_driver_stdio rebinds.
const char* const* stdio_hook_names(size_t* count) noexcept;

// Binds the stdio imports of the object holding `driver_function` (libcuda) as the global scope would (above).
// Returns how many GOT entries it changed. Not thread-safe against itself: call once, at start.
int bind_driver_stdio(const void* driver_function) noexcept;

}  // namespace cdsa
