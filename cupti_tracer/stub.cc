// The CUPTI backend when cdsa was built without CUPTI headers: selecting it
// prints one line and the driver interposition keeps recording.
#include "cupti_tracer/backend.h"

#include "shim/common/config.h"
#include "shim/intercept/lifecycle.h"
#include "shim/common/log.h"

#include "base/export.h"

namespace cdsa {

bool cupti_backend_active() noexcept { return false; }

void cupti_backend_start() noexcept {
  if (config().enabled && config().backend == Backend::Cupti)
    CDSA_NOTICE_ONCE(
        "CDSA_BACKEND=cupti: this libcdsa.so was built without CUPTI headers; recording launches "
        "through driver interposition instead");
}

namespace {
// After entry.cc's constructor(101) has read the configuration: say it once cdsa has started.
__attribute__((constructor(102))) void register_backend() {
  if (config().enabled && config().backend == Backend::Cupti) on_started(cupti_backend_start);
}
}  // namespace

}  // namespace cdsa

extern "C" CDSA_EXPORT int InitializeInjection(void) {
  CDSA_NOTICE_ONCE(
      "loaded through CUDA_INJECTION64_PATH, but built without CUPTI headers: no launch is recorded "
      "unless libcdsa.so is also preloaded");
  return 1;
}
