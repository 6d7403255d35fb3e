// Test helper for sim_test: calls back from this library's destructor.
// sim_test links libcuda.so.1 (the sim) before this library, so the dynamic
// loader runs this destructor after the sim's own one: the callback plays an
// exit handler of another library that runs after the sim shut its workers down.

using Callback = void (*)();

static Callback g_callback = nullptr;

extern "C" __attribute__((visibility("default"))) void sim_test_call_at_late_fini(Callback cb) { g_callback = cb; }

__attribute__((destructor)) static void late_fini() {
  if (g_callback != nullptr) g_callback();
}
