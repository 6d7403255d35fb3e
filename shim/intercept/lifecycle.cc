#include "shim/intercept/lifecycle.h"

#include <mutex>

#include "shim/common/config.h"
#include "shim/intercept/libc_hooks.h"
#include "shim/common/driver.h"
#include "shim/fault/fault.h"
#include "shim/record/graph_capture.h"
#include "shim/record/recorder.h"

namespace cdsa {

namespace {

std::once_flag g_start_once;
std::atomic<StartHook> g_start_hook{nullptr};

void start(const void* hint) {
  report_config_problems_once();  // the process uses CUDA: now its CDSA_* problems matter
  if (!config().enabled) return;
  driver_init(hint);
  if (!driver_ready() || !recorder_init()) return;
  // libcuda loaded with RTLD_DEEPBIND binds its stdio to libc, past the capture hooks: bind them as a plain load.
  bind_driver_stdio(reinterpret_cast<const void*>(driver().CtxGetCurrent));
  graph_capture_init();
  fault_handling_init();
  mark_started();
  if (StartHook hook = g_start_hook.load(std::memory_order_acquire)) hook();
}

}  // namespace

bool ensure_started(const void* hint) noexcept {
  if (started()) return true;
  if (!config().enabled) return false;
  std::call_once(g_start_once, [hint] { start(hint); });
  return started();
}

void on_started(StartHook hook) noexcept { g_start_hook.store(hook, std::memory_order_release); }

}  // namespace cdsa
