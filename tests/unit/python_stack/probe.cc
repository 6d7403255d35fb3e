// pystack_probe: a shared library the Python test loads with ctypes. Every
// export captures and resolves the *calling* thread's Python stack through
// cdsa_python_stack, exactly as the shim does at a kernel launch.
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <cstdio>
#include <cstring>

#include "shim/stacks/python_stack.h"

namespace {

constexpr int kMaxFrames = 4096;

// Appends "file\tfunction\tline\n" for each frame; returns the number of
// frames, -1 if out is too small, -2 if a fingerprint did not re-validate,
// -3 if a frame did not resolve.
int format_frames(const cdsa::PyFrameKey* keys, int n, char* out, int cap) {
  if (cap <= 0) return -1;
  int w = 0;
  out[0] = '\0';
  for (int i = 0; i < n; ++i) {
    if (cdsa::python_code_check(keys[i].code) != keys[i].code_check) return -2;
    char file[1024], func[512];
    int line = 0;
    if (!cdsa::resolve_python_frame(keys[i], file, sizeof file, func, sizeof func, &line))
      return -3;
    const int k = std::snprintf(out + w, size_t(cap - w), "%s\t%s\t%d\n", file, func, line);
    if (k < 0 || k >= cap - w) return -1;
    w += k;
  }
  return n;
}

void* native_thread(void* arg) {
  cdsa::PyFrameKey keys[64];
  *static_cast<int*>(arg) = cdsa::capture_python_frames(keys, 64);
  return nullptr;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cdsa_probe_init(void) {
  return int(cdsa::python_walker_init());  // 0 NoPython, 1 Ready, 2 Unsupported
}

__attribute__((visibility("default"))) const char* cdsa_probe_description(void) {
  return cdsa::python_walker_description();
}

// Captures up to max frames (max <= 4096) and formats them into out.
// *truncated (may be null) receives the truncation flag.
// Every capture is also taken twice through the verified chain cache (the first may hit a chain of an earlier
// call, or fill; the second must hit where the chain fits): both must be exactly the plain walk, else -4.
__attribute__((visibility("default"))) int cdsa_probe_stack_max(char* out, int cap, int max,
                                                                 int* truncated) {
  // On the stack: the library's TLS is static (the chain cache's pointer is initial-exec), with no room for these.
  cdsa::PyFrameKey keys[kMaxFrames], cached[kMaxFrames];
  if (max > kMaxFrames) max = kMaxFrames;
  bool tr = false;
  const int n = cdsa::capture_python_frames(keys, max, &tr);
  for (int pass = 0; pass < 2; ++pass) {
    cdsa::PyCapture how;
    how.borrow = pass == 1;
    const int m = cdsa::capture_python_frames_cached(cached, max, &how);
    if (m != n || how.truncated != tr || memcmp(how.frames, keys, sizeof(cdsa::PyFrameKey) * size_t(n)) != 0)
      return -4;
    if (pass == 1 && !how.hit && how.token != 0) return -5;  // cached by the first pass, yet not served
  }
  if (truncated) *truncated = tr ? 1 : 0;
  return format_frames(keys, n, out, cap);
}

// One capture through the verified chain cache (as a launch takes it: borrowed keys), compared with the plain walk
// taken first (-4 if it differs). *hit: 1 if the cache served it. Then formatted like cdsa_probe_stack_max.
__attribute__((visibility("default"))) int cdsa_probe_cached_once(char* out, int cap, int max, int* hit) {
  cdsa::PyFrameKey keys[kMaxFrames], cached[kMaxFrames];
  if (max > kMaxFrames) max = kMaxFrames;
  bool tr = false;
  const int n = cdsa::capture_python_frames(keys, max, &tr);
  cdsa::PyCapture how;
  how.borrow = true;
  const int m = cdsa::capture_python_frames_cached(cached, max, &how);
  if (m != n || how.truncated != tr || memcmp(how.frames, keys, sizeof(cdsa::PyFrameKey) * size_t(n)) != 0) return -4;
  if (hit) *hit = how.hit ? 1 : 0;
  return format_frames(keys, n, out, cap);
}

// This thread's chain cache counters: hits, partial re-walks, fills, plain walks, the hits served by the chain that
// followed the last one served (of the hits), and the chain checks that read the frames' words and the guards.
__attribute__((visibility("default"))) void cdsa_probe_chain_stats(unsigned long long* out6) {
  const cdsa::PyChainStats s = cdsa::python_chain_stats();
  out6[0] = s.hits;
  out6[1] = s.partial;
  out6[2] = s.fills;
  out6[3] = s.plain;
  out6[4] = s.predicted;
  out6[5] = s.word_checks;
}

__attribute__((visibility("default"))) void cdsa_probe_chain_clear(void) { cdsa::python_chain_cache_clear(); }

// Another layer wrapping PyCode_Type's tp_dealloc after the walker's own wrapper (it calls on what it found there):
// the walker must stop trusting its count of code frees. 0 when wrapped.
namespace {
void (*g_prev_code_dealloc)(void*) = nullptr;
void other_layers_code_dealloc(void* code) { g_prev_code_dealloc(code); }
}  // namespace
__attribute__((visibility("default"))) int cdsa_probe_wrap_code_dealloc(void) {
  const cdsa::pystack::PyLayout* L = cdsa::pystack::active_layout();
  auto* type = static_cast<char*>(dlsym(RTLD_DEFAULT, "PyCode_Type"));
  if (!L || !type) return -1;
  auto** slot = reinterpret_cast<void (**)(void*)>(type + L->type_dealloc);
  g_prev_code_dealloc = *slot;
  *slot = &other_layers_code_dealloc;
  return 0;
}

__attribute__((visibility("default"))) int cdsa_probe_stack(char* out, int cap) {
  return cdsa_probe_stack_max(out, cap, kMaxFrames, nullptr);
}

// Resolves the innermost frame into caller-sized buffers (truncation test).
__attribute__((visibility("default"))) int cdsa_probe_innermost(char* file, int file_cap,
                                                                 char* func, int func_cap,
                                                                 int* line) {
  cdsa::PyFrameKey key;
  if (cdsa::capture_python_frames(&key, 1) != 1) return 0;
  return cdsa::resolve_python_frame(key, file, size_t(file_cap), func, size_t(func_cap), line)
             ? 1
             : 0;
}

// Number of frames a pthread created here (no Python thread state) captures;
// -1 if the thread could not be created.
__attribute__((visibility("default"))) int cdsa_probe_native_thread_frames(void) {
  int count = -100;
  pthread_t t;
  if (pthread_create(&t, nullptr, native_thread, &count) != 0) return -1;
  pthread_join(t, nullptr);
  return count;
}

// resolve_python_frame / python_code_check on an arbitrary object (e.g. a str
// or a function): must be rejected. Returns 1 if resolve returned true or the
// fingerprint was non-zero.
__attribute__((visibility("default"))) int cdsa_probe_accepts_object(const void* obj) {
  cdsa::PyFrameKey key{obj, 0, 1};
  char file[64], func[64];
  int line;
  const bool ok = cdsa::resolve_python_frame(key, file, sizeof file, func, sizeof func, &line);
  return (ok || cdsa::python_code_check(obj) != 0) ? 1 : 0;
}

// A captured key whose fingerprint is altered must not resolve. Returns 1 if
// it resolved anyway, 0 if rejected, -1 if nothing was captured.
__attribute__((visibility("default"))) int cdsa_probe_bad_check_resolves(void) {
  cdsa::PyFrameKey key;
  if (cdsa::capture_python_frames(&key, 1) != 1) return -1;
  key.code_check ^= 0x5a5a5a5au;
  char file[64], func[64];
  int line;
  return cdsa::resolve_python_frame(key, file, sizeof file, func, sizeof func, &line) ? 1 : 0;
}

inline double now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

// Nanoseconds per capture of up to max frames: the best batch average over
// iters captures split into batches of 1000 (robust to a noisy machine);
// *frames gets the depth captured. *resolve_ns gets the best batch average
// cost of resolving one frame.
__attribute__((visibility("default"))) double cdsa_probe_bench_ns(int iters, int max,
                                                                   int* frames,
                                                                   double* resolve_ns) {
  cdsa::PyFrameKey keys[kMaxFrames];
  if (max > kMaxFrames) max = kMaxFrames;
  const int n = cdsa::capture_python_frames(keys, max);  // warm-up
  if (frames) *frames = n;
  constexpr int kBatch = 1000;
  double best = 1e30;
  for (int done = 0; done < iters; done += kBatch) {
    const double a = now_ns();
    for (int i = 0; i < kBatch; ++i) {
      cdsa::capture_python_frames(keys, max);
      asm volatile("" : : "r"(keys) : "memory");
    }
    const double t = (now_ns() - a) / kBatch;
    if (t < best) best = t;
  }
  if (resolve_ns) {
    char file[512], func[256];
    int line;
    double rbest = 0;
    if (n > 0) {
      rbest = 1e30;
      for (int r = 0; r < 200; ++r) {
        const double a = now_ns();
        for (int i = 0; i < n; ++i)
          cdsa::resolve_python_frame(keys[i], file, sizeof file, func, sizeof func, &line);
        const double t = (now_ns() - a) / n;
        if (t < rbest) rbest = t;
      }
    }
    *resolve_ns = rbest;
  }
  return iters > 0 ? best : 0.0;
}

// The active layout as "name value" lines (diagnostics).
__attribute__((visibility("default"))) int cdsa_probe_layout(char* out, int cap) {
  const cdsa::pystack::PyLayout* L = cdsa::pystack::active_layout();
  if (!L || cap <= 0) return 0;
  int w = 0;
#define CDSA_P(f)                                                                   \
  w += std::snprintf(out + w, size_t(cap - w), "%s %lld\n", #f, (long long)L->f); \
  if (w >= cap) return -1;
  CDSA_P(minor) CDSA_P(tstate_cframe) CDSA_P(cframe_current_frame)
  CDSA_P(tstate_current_frame) CDSA_P(frame_code) CDSA_P(frame_previous)
  CDSA_P(frame_instr) CDSA_P(frame_owner) CDSA_P(code_tag_mask)
  CDSA_P(code_filename) CDSA_P(code_qualname) CDSA_P(code_linetable)
  CDSA_P(code_firstlineno) CDSA_P(code_firsttraceable) CDSA_P(code_adaptive)
  CDSA_P(str_ascii_size) CDSA_P(str_compact_size) CDSA_P(state_auto)
#undef CDSA_P
  return w;
}

}  // extern "C"
