// Driver-level interposition (see interpose.cc).
//
// Contract: `wrap_dlsym_result` is called by the dlsym/dlvsym hooks for the
// driver symbols cdsa wraps: it returns the wrapper of that symbol's prototype
// bound to exactly `real` (else `real`). `is_wrapped_symbol` says whether a name
// is one of them (every stub libcuda.so export but the exempt ones). Both are
// thread-safe and lock-free.
#pragma once

namespace cdsa {

void* wrap_dlsym_result(void* handle, const char* name, void* real) noexcept;
bool is_wrapped_symbol(const char* name) noexcept;
void interpose_init() noexcept;  // builds the trampoline table (constructor)

}  // namespace cdsa
