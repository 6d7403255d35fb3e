#include "shim/common/passthrough.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include "shim/common/libc_symbols.h"

namespace {
constexpr int kThunks = 1024;  // cuda-bindings 13.5 asks for ~100 entry points newer than CUDA 13.0's headers
constexpr int kNameMax = 96;   // the longest driver entry point name is under 50 characters
}  // namespace

// The thunks' data, addressed by the code below: thunk i sets called[i] and jumps through target[i].
extern "C" {
[[gnu::visibility("hidden")]] unsigned char cdsa_thunk_called[kThunks];
[[gnu::visibility("hidden")]] void* cdsa_thunk_target[kThunks];
[[gnu::visibility("hidden")]] extern const char cdsa_thunks_begin[];
[[gnu::visibility("hidden")]] extern const char cdsa_thunks_end[];
}

// Thunk i sits at cdsa_thunks_begin + 32 * i. Each sets its byte and tail-jumps: no register, no stack slot is
// touched on x86-64 (a RIP-relative store of an immediate, an indirect jump through memory); on aarch64 only x16
// and x17, which the procedure call standard leaves to veneers and PLT stubs, between any caller and callee. Each
// begins with the landing pad an indirect call needs where branch tracking is on (endbr64, bti c: a no-op where
// it is not).
#define CDSA_STR2(x) #x
#define CDSA_STR(x) CDSA_STR2(x)
// The pool: kThunks thunks of 32 bytes between cdsa_thunks_begin and cdsa_thunks_end, each the architecture's body
// with cdsa_thunk_i its index.
#define CDSA_THUNK_POOL(progbits, body)                  \
  ".pushsection .text.cdsa_thunks,\"ax\"," progbits "\n" \
  ".balign 32\n"                                         \
  ".globl cdsa_thunks_begin\n"                           \
  ".hidden cdsa_thunks_begin\n"                          \
  "cdsa_thunks_begin:\n"                                 \
  ".set cdsa_thunk_i, 0\n"                               \
  ".rept " CDSA_STR(1024) "\n"                           \
  ".balign 32\n" body                                    \
  ".set cdsa_thunk_i, cdsa_thunk_i+1\n"                  \
  ".endr\n"                                              \
  ".balign 32\n"                                         \
  ".globl cdsa_thunks_end\n"                             \
  ".hidden cdsa_thunks_end\n"                            \
  "cdsa_thunks_end:\n"                                   \
  ".popsection\n"
#if defined(__x86_64__)
asm(CDSA_THUNK_POOL("@progbits",
                    "endbr64\n"
                    "movb $1, cdsa_thunk_called+cdsa_thunk_i(%rip)\n"
                    "jmp *cdsa_thunk_target+8*cdsa_thunk_i(%rip)\n"));
#elif defined(__aarch64__)
asm(CDSA_THUNK_POOL("%progbits",
                    "hint 34\n"  // bti c
                    "adrp x16, cdsa_thunk_called+cdsa_thunk_i\n"
                    "add x16, x16, :lo12:cdsa_thunk_called+cdsa_thunk_i\n"
                    "mov w17, #1\n"
                    "strb w17, [x16]\n"
                    "adrp x16, cdsa_thunk_target+8*cdsa_thunk_i\n"
                    "ldr x16, [x16, :lo12:cdsa_thunk_target+8*cdsa_thunk_i]\n"
                    "br x16\n"));
#else
#error "passthrough.cc: no thunk for this architecture"
#endif
static_assert(kThunks == 1024, "the .rept count above");

namespace cdsa {
namespace {

constexpr size_t kThunkSize = 32;

struct ThunkInfo {
  char name[kNameMax];
  int version;
  void* target;
  bool changes_work;
};
ThunkInfo g_info[kThunks];
std::atomic<int> g_count{0};  // thunks made: g_info[0, count) is written before count covers it (release)
std::atomic<bool> g_exhausted{false};
std::mutex g_make;

int find(int n, const char* name, int version, void* target) {
  for (int i = 0; i < n; ++i)
    if (g_info[i].target == target && g_info[i].version == version && same_text(g_info[i].name, name)) return i;
  return -1;
}

void* thunk_at(int i) { return const_cast<char*>(cdsa_thunks_begin) + kThunkSize * static_cast<size_t>(i); }

}  // namespace

bool entry_point_changes_work(const char* name) noexcept {
  if (!name) return false;
  // Queries, attributes and settings change nothing on any stream (cuStreamGetDevResource, cuGraphNodeGetParams,
  // cuStreamIsCapturing, cuGraphExecGetId, cuCoredumpRegisterStartCallback...).
  for (const char* quiet : {"Get", "Query", "Is", "Attribute", "Coredump", "Version"})
    if (contains_text(name, quiet)) return false;
  for (const char* work : {"Launch", "Graph", "Capture", "Stream", "Event", "HostFunc", "Async", "Memcpy", "Memset",
                           "Semaphore", "Ctx", "Unload"})
    if (contains_text(name, work)) return true;
  return false;
}

void* passthrough_thunk(const char* name, int version, void* target) noexcept {
  if (!name || !target) return nullptr;
  int i = find(g_count.load(std::memory_order_acquire), name, version, target);
  if (i >= 0) return thunk_at(i);
  std::lock_guard<std::mutex> lock(g_make);
  const int n = g_count.load(std::memory_order_relaxed);
  i = find(n, name, version, target);
  if (i >= 0) return thunk_at(i);
  size_t len = 0;
  while (name[len]) ++len;
  if (n >= kThunks || len >= static_cast<size_t>(kNameMax)) {
    g_exhausted.store(true, std::memory_order_release);
    return nullptr;
  }
  ThunkInfo& t = g_info[n];
  memcpy(t.name, name, len + 1);
  t.version = version;
  t.target = target;
  t.changes_work = entry_point_changes_work(name);
  // The jump target before the thunk is handed out: a thread that gets the thunk from this one gets the target.
  __atomic_store_n(&cdsa_thunk_target[n], target, __ATOMIC_RELEASE);
  g_count.store(n + 1, std::memory_order_release);
  return thunk_at(n);
}

void passthrough_called(std::vector<PassthroughCall>* out) {
  const int n = g_count.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i)
    if (__atomic_load_n(&cdsa_thunk_called[i], __ATOMIC_RELAXED))
      out->push_back({g_info[i].name, g_info[i].version, g_info[i].changes_work});
}

bool passthrough_pool_exhausted() noexcept { return g_exhausted.load(std::memory_order_acquire); }

bool is_passthrough_thunk(const void* pc) noexcept {
  const char* p = static_cast<const char*>(pc);
  return p >= cdsa_thunks_begin && p < cdsa_thunks_end;
}

}  // namespace cdsa
