#include "shim/record/assert_capture.h"

#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "shim/common/thread_slots.h"

#include "base/device_assert.h"

namespace cdsa {

__thread int tl_driver_call_depth __attribute__((tls_model("initial-exec"))) = 0;  // see the header
__thread size_t tl_capture_len __attribute__((tls_model("initial-exec"))) = 0;
__thread size_t tl_capture_published __attribute__((tls_model("initial-exec"))) = 0;  // bytes of tl_buf in the kept text
namespace {

constexpr size_t kCapture = 8192;
// Per-call state uses the initial-exec TLS model (no __tls_get_addr call). libcdsa.so's whole TLS block then
// lives in static TLS, which a library dlopen'ed later (CUDA_INJECTION64_PATH) gets only a few hundred bytes
// of: so the buffer is mapped on first use, not a thread_local array.
[[gnu::tls_model("initial-exec")]] thread_local char* tl_buf = nullptr;

char* capture_buffer() {
  if (!tl_buf) {
    void* p = mmap(nullptr, kCapture, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) tl_buf = static_cast<char*>(p);  // one page pair per thread that ever captures, kept
  }
  return tl_buf;
}

std::mutex g_kept_mutex;
std::string* g_kept = nullptr;
const void* g_kept_owner = nullptr;  // the thread whose driver call is publishing (&tl_driver_call_depth), else null
std::atomic<bool> g_have_kept{false};

const void* this_thread_id() { return &tl_driver_call_depth; }

// Publishes this call's text up to its last complete line once it holds an assert line. The same call may
// extend what it published (libcuda prints one line at a time); another thread's text never replaces it.
void publish_lines() {
  const char* block = static_cast<const char*>(
      memmem(tl_buf, tl_capture_len, base::kDeviceAssertMarker.data(), base::kDeviceAssertMarker.size()));
  if (!block) return;
  const char* end = static_cast<const char*>(memrchr(tl_buf, '\n', tl_capture_len));
  if (!end || end < block) return;
  size_t upto = static_cast<size_t>(end - tl_buf) + 1;
  if (upto <= tl_capture_published) return;
  std::lock_guard<std::mutex> lock(g_kept_mutex);
  if (g_kept && g_kept_owner != this_thread_id()) return;
  if (!g_kept) g_kept = new std::string;
  g_kept->assign(tl_buf, upto);
  g_kept_owner = this_thread_id();
  tl_capture_published = upto;
  g_have_kept.store(true, std::memory_order_release);
}

// Set while this thread publishes: a signal handler that writes to stderr meanwhile (faulthandler, a crash
// reporter) must not take g_kept_mutex again on the same thread. Its bytes still reach stderr, uncaptured.
[[gnu::tls_model("initial-exec")]] thread_local bool tl_publishing = false;

}  // namespace

void capture_stderr_bytes(const void* buf, size_t n) noexcept {
  if (tl_driver_call_depth == 0 || !buf || n == 0 || tl_publishing || !capture_buffer()) return;
  size_t room = kCapture - tl_capture_len;
  if (n > room) n = room;
  memcpy(tl_buf + tl_capture_len, buf, n);
  tl_capture_len += n;
  tl_publishing = true;
  publish_lines();
  tl_publishing = false;
}

void DriverCallScope::leave_slow() noexcept {
  // What a driver call printed may be the device's assert text even when this call itself succeeded (the
  // fault surfaced in one of cdsa's own calls on this thread): keep it for whichever thread reports.
  if (tl_capture_len > tl_capture_published && base::holds_device_assert(tl_buf, tl_capture_len)) {
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    if (!g_kept || g_kept_owner == this_thread_id()) {
      if (!g_kept) g_kept = new std::string;
      g_kept->assign(tl_buf, tl_capture_len);
      g_have_kept.store(true, std::memory_order_release);
    }
  }
  if (tl_capture_published > 0) {  // this call published: its text is final now
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    if (g_kept_owner == this_thread_id()) g_kept_owner = nullptr;
  }
}

std::string captured_driver_stderr() {
  if (tl_driver_call_depth == 0 || !tl_buf || tl_capture_len <= tl_capture_published)
    return std::string();  // not inside a call, or nothing new
  return std::string(tl_buf + tl_capture_published, tl_capture_len - tl_capture_published);
}

void keep_device_text(const std::string& text) {
  if (text.empty()) return;
  std::lock_guard<std::mutex> lock(g_kept_mutex);
  if (!g_kept) {
    g_kept = new std::string(text);
    g_have_kept.store(true, std::memory_order_release);
  }
}

std::string kept_device_text() {
  std::lock_guard<std::mutex> lock(g_kept_mutex);
  return g_kept ? *g_kept : std::string();
}

bool wait_for_device_text(std::chrono::steady_clock::time_point deadline) noexcept {
  for (;;) {
    if (g_have_kept.load(std::memory_order_acquire)) return true;
    if (!other_thread_in_driver_call() || std::chrono::steady_clock::now() >= deadline)
      return g_have_kept.load(std::memory_order_acquire);
    timespec ts{0, 1000000};  // 1 ms
    nanosleep(&ts, nullptr);
  }
}

// ---------------------------------------------------------------- what the stdio and write hooks hand over
void capture_format(const char* fmt, va_list ap) noexcept {
  if (!fmt || !capture_buffer()) return;
  char line[1024];
  va_list cp;
  va_copy(cp, ap);
  int n = vsnprintf(line, sizeof line, fmt, cp);
  va_end(cp);
  if (n > 0) capture_stderr_bytes(line, static_cast<size_t>(n) < sizeof line ? n : sizeof line - 1);
}

void capture_char(int c) noexcept {
  char ch = static_cast<char>(c);
  capture_stderr_bytes(&ch, 1);
}

}  // namespace cdsa
