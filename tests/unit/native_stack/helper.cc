// A library the native stack test loads, calls through, unloads and loads again.
#include <cstdint>

volatile int g_helper_sink = 0;

extern "C" __attribute__((noinline)) int ns_helper_call(int (*cb)(void*), void* arg) {
  int r = cb(arg);
  g_helper_sink = g_helper_sink + 1;  // not a tail call: this frame stays on the stack
  return r;
}
