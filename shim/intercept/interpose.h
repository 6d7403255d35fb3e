// Driver-level interposition (see interpose.cc).
//
// Contract: `wrap_dlsym_result` is called by the dlsym/dlvsym hooks for the
// driver symbols cdsa wraps: it returns the wrapper of that symbol's prototype
// bound to exactly `real` (else `real`); for a driver name the table does not know, found in libcuda, a
// pass-through thunk to `real`. `is_wrapped_symbol` says whether a name is one of them (every stub libcuda.so
// export but the exempt ones, and unknown driver names). Both are thread-safe and lock-free.
#pragma once

namespace cdsa {

void* wrap_dlsym_result(void* handle, const char* name, void* real) noexcept;
// A name the dlsym hooks look up themselves: one cdsa wraps, or a driver name it does not know (whose answer, when
// it is libcuda's, comes back as a pass-through thunk: shim/common/passthrough.h).
bool is_wrapped_symbol(const char* name) noexcept;
void interpose_init() noexcept;  // builds the trampoline table (constructor)

}  // namespace cdsa
