#include "shim/assert_capture.h"

#include <cstring>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>

#include "shim/driver.h"

#define CDSA_EXPORT __attribute__((visibility("default")))

namespace cdsa {
namespace {

constexpr size_t kCapture = 8192;
// Per-call state uses the initial-exec TLS model (no __tls_get_addr call). libcdsa.so's whole TLS block then
// lives in static TLS, which a library dlopen'ed later (CUDA_INJECTION64_PATH) gets only a few hundred bytes
// of: so the buffer is mapped on first use, not a thread_local array.
[[gnu::tls_model("initial-exec")]] thread_local int tl_depth = 0;
[[gnu::tls_model("initial-exec")]] thread_local size_t tl_len = 0;
[[gnu::tls_model("initial-exec")]] thread_local char* tl_buf = nullptr;

char* capture_buffer() {
  if (!tl_buf) {
    void* p = mmap(nullptr, kCapture, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) tl_buf = static_cast<char*>(p);  // one page pair per thread that ever captures, kept
  }
  return tl_buf;
}

}  // namespace

DriverCallScope::DriverCallScope() noexcept {
  if (tl_depth++ == 0) tl_len = 0;
}
DriverCallScope::~DriverCallScope() {
  // What a driver call printed may be the device's assert text even when this call itself succeeded (the
  // fault surfaced in one of cdsa's own calls on this thread): keep it for whichever thread reports.
  if (--tl_depth == 0 && tl_len > 0 && memmem(tl_buf, tl_len, ": block: [", 10))
    keep_device_text(std::string(tl_buf, tl_len));
}

std::string captured_driver_stderr() { return tl_buf ? std::string(tl_buf, tl_len) : std::string(); }

void keep_device_text(const std::string& text);

namespace {
std::mutex g_kept_mutex;
std::string* g_kept = nullptr;
}  // namespace

void keep_device_text(const std::string& text) {
  if (text.empty()) return;
  std::lock_guard<std::mutex> lock(g_kept_mutex);
  if (!g_kept) g_kept = new std::string(text);
}

std::string kept_device_text() {
  std::lock_guard<std::mutex> lock(g_kept_mutex);
  return g_kept ? *g_kept : std::string();
}

void capture_stderr_bytes(const void* buf, size_t n) noexcept {
  if (tl_depth == 0 || !buf || !capture_buffer()) return;
  size_t room = kCapture - tl_len;
  if (n > room) n = room;
  memcpy(tl_buf + tl_len, buf, n);
  tl_len += n;
}

std::vector<DeviceAssert> parse_device_asserts(const std::string& text) {
  // <file>:<line>: <function>: block: [x,y,z], thread: [x,y,z] Assertion `...` failed.
  std::vector<DeviceAssert> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    size_t block = line.find(": block: [");
    if (block == std::string::npos || line.find("Assertion") == std::string::npos) continue;
    size_t c1 = line.find(':');
    if (c1 == std::string::npos || c1 >= block) continue;
    size_t c2 = line.find(": ", c1 + 1);
    if (c2 == std::string::npos || c2 > block) continue;
    DeviceAssert a;
    a.file = line.substr(0, c1);
    a.line = atoi(line.substr(c1 + 1, c2 - c1 - 1).c_str());
    a.function = line.substr(c2 + 2, block - c2 - 2);
    a.message = line;
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace cdsa

namespace {
using WriteFn = ssize_t (*)(int, const void*, size_t);
WriteFn g_real_write = nullptr;
}  // namespace

extern "C" CDSA_EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  if (fd == 2) cdsa::capture_stderr_bytes(buf, n);
  WriteFn w = __atomic_load_n(&g_real_write, __ATOMIC_ACQUIRE);
  if (__builtin_expect(w == nullptr, 0)) {
    w = reinterpret_cast<WriteFn>(cdsa::libc_function("write"));
    __atomic_store_n(&g_real_write, w, __ATOMIC_RELEASE);
  }
  return w(fd, buf, n);
}
