#include "shim/intercept/front_end.h"

#include <cstdint>

#include "shim/common/driver.h"
#include "shim/fault/fault.h"
#include "shim/record/assert_capture.h"
#include "shim/record/graph_capture.h"
#include "shim/stacks/native_stack.h"

namespace cdsa {

void surface_driver_result(CUresult r, const char* call) noexcept {
  if (is_sticky_fault(r)) on_sticky_fault(r, call && *call ? call : "a CUDA driver call");
}

void* front_end_dlsym(void* handle, const char* name) noexcept { return real_dlsym()(handle, name); }

bool in_cdsa_code(const void* addr) noexcept { return pc_in_cdsa(reinterpret_cast<uintptr_t>(addr)); }

bool in_wrapped_driver_call() noexcept { return in_driver_call(); }

void capture_begun(CUstream stream, bool per_thread, CUgraph recapture_of) noexcept {
  if (recapture_of)
    note_recapture_begin(stream, per_thread, recapture_of);
  else
    note_capture_begin(stream, per_thread);
}

void before_teardown(const char* call) noexcept {
  probe_before_teardown(call);
  before_context_teardown();
}

void capture_ended(CUstream stream, bool per_thread, CUgraph graph) noexcept {
  note_capture_end(stream, per_thread, graph);
}

}  // namespace cdsa
