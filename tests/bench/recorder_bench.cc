// The recorder's parts, one at a time, for tests/bench/recorder_bench.py: native capture at a chosen depth
// (verified-cache hit, cache emptied before each capture, and libunwind's unw_backtrace alone), the whole
// capture-and-intern of a repeated stack, a ring publish, and the Python walk (called from Python through
// ctypes, so the walk sees the caller's Python frames). Each case runs `iters` times in leaf's loop, the only
// code the script's callgrind run collects; the script divides by `iters`.
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#endif

#include <cstdint>
#include <cstring>
#include <ctime>

#include "shim/common/config.h"
#include "shim/stacks/native_stack.h"
#include "shim/stacks/python_stack.h"
#include "shim/record/recorder.h"

namespace {

enum Case { kNativeHit = 0, kNativeFill = 1, kNativeLibunwind = 2, kIntern = 3, kRing = 4, kPython = 5, kPythonHit = 6 };

volatile int g_sink = 0;
int g_depth = 0, g_collect = 0;

__attribute__((noinline)) int leaf(int kase, int iters) {
  uintptr_t pcs[256];
  cdsa::PyFrameKey py[256];
  int total = 0;
  if (g_collect) CALLGRIND_TOGGLE_COLLECT;
  for (int i = 0; i < iters; ++i) {
    switch (kase) {
      case kNativeHit:
        total += cdsa::capture_native_stack(pcs, g_depth);
        break;
      case kNativeFill:
        cdsa::native_cache_clear();
        total += cdsa::capture_native_stack(pcs, g_depth);
        break;
      case kNativeLibunwind:
        total += cdsa::capture_native_stack_uncached(pcs, g_depth);
        break;
      case kIntern:
        total += static_cast<int>(cdsa::capture_and_intern_stack());
        break;
      case kRing: {
        cdsa::LaunchRecord r;
        r.seq = cdsa::next_launch_seq();
        r.stack_id = 1;
        cdsa::ring_publish(r);
        ++total;
        break;
      }
      case kPython:
        total += cdsa::capture_python_frames(py, 256);
        break;
      case kPythonHit: {
        cdsa::PyCapture how;
        how.borrow = true;
        total += cdsa::capture_python_frames_cached(py, 256, &how);
        break;
      }
    }
  }
  if (g_collect) CALLGRIND_TOGGLE_COLLECT;
  return total;
}

__attribute__((noinline)) int descend(int depth, int kase, int iters) {
  int r = depth <= 1 ? leaf(kase, iters) : descend(depth - 1, kase, iters);
  g_sink = g_sink + 1;  // not a tail call: every level stays a frame
  return r;
}

}  // namespace

extern "C" {

// The CDSA_* variables as libcdsa.so reads them (before cdsa_rb_init: the tables are then mapped at those sizes).
void cdsa_rb_load_config() { cdsa::load_config(); }

int cdsa_rb_init() { return cdsa::recorder_init() && cdsa::native_stack_init() ? 0 : 1; }

// `depth` native frames of this library under the capture; the native cases capture exactly `depth` frames.
// With `collect`, the measured loop alone is collected by callgrind (--collect-atstart=no).
int cdsa_rb_run(int kase, int depth, int iters, int collect) {
  g_depth = depth;
  g_collect = collect;
  return descend(depth, kase, iters);
}

uint64_t cdsa_rb_hits() { return cdsa::native_cache_stats().hits; }
uint64_t cdsa_rb_mapped_bytes() { return cdsa::recorder_mapped_bytes(); }
uint64_t cdsa_rb_thread_bytes() { return cdsa::native_cache_bytes_per_thread(); }

int64_t cdsa_rb_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // extern "C"
