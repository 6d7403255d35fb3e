#include "shim/intercept/front_end.h"

#include <cstdint>

#include "shim/common/driver.h"
#include "shim/fault/fault.h"
#include "shim/stacks/native_stack.h"

namespace cdsa {

void surface_driver_result(CUresult r, const char* call) noexcept {
  if (is_sticky_fault(r)) on_sticky_fault(r, call && *call ? call : "a CUDA driver call");
}

void* front_end_dlsym(void* handle, const char* name) noexcept { return real_dlsym()(handle, name); }

bool in_cdsa_code(const void* addr) noexcept { return pc_in_cdsa(reinterpret_cast<uintptr_t>(addr)); }

}  // namespace cdsa
