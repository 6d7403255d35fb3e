// Driver-level interposition (see interpose.cc).
//
// Contract: `wrap_dlsym_result` is called by the dlsym/dlvsym hooks for names
// starting with "cu": it returns a wrapper for the entry points cdsa wraps
// (bound to exactly `real`), else `real`. Thread-safe, lock-free.
#pragma once

namespace cdsa {

void* wrap_dlsym_result(void* handle, const char* name, void* real) noexcept;
void interpose_init() noexcept;  // builds the trampoline table (constructor)

}  // namespace cdsa
