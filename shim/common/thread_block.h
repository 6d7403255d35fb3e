// A per-thread block of memory for the launch path's caches: mapped on the
// thread's first use, unmapped when the thread exits.
//
// Why mapped and not a thread_local object: libcdsa.so's TLS uses the
// initial-exec model (no __tls_get_addr call on the hot path), so its whole TLS
// block lives in static TLS, of which a library dlopen'ed later
// (CUDA_INJECTION64_PATH) gets only a few hundred bytes. Only the block's
// pointer and a failed flag are initial-exec TLS here.
//
// Contract: `ThreadBlock<T>::get()` returns this thread's T, value-initialised
// on the first call (a trivially constructible T is left as mmap zeroed it, so
// its untouched pages stay unresident; then `T::attach()`, where T has one, may
// refuse the block by returning false), or null where mapping or the thread-exit key failed; a
// thread tries once, so a failing thread pays one test per call afterwards. The
// hot path is a TLS load and a test. The block is unmapped by a pthread key
// destructor at thread exit (T's destructor is not run: T must be trivially
// destructible); a later use during the thread's exit maps a fresh one, freed in
// the next destructor round. Not async-signal-safe on the first call of a
// thread (pthread_key_create, mmap). `peek()` never maps.
//
//   struct StreamCache { ... };
//   if (StreamCache* c = ThreadBlock<StreamCache>::get()) use(*c);
#pragma once

#include <pthread.h>
#include <sys/mman.h>

#include <mutex>
#include <new>
#include <type_traits>

namespace cdsa {

template <typename T>
class ThreadBlock {
  static_assert(std::is_trivially_destructible_v<T>, "the block is unmapped without running T's destructor");

 public:
  static T* get() noexcept {
    if (__builtin_expect(tl_block_ != nullptr || tl_failed_, 1)) return tl_block_;
    return attach_new();
  }
  static T* peek() noexcept { return tl_block_; }

 private:
  [[gnu::tls_model("initial-exec")]] static inline thread_local T* tl_block_ = nullptr;
  [[gnu::tls_model("initial-exec")]] static inline thread_local bool tl_failed_ = false;
  static inline pthread_key_t key_;
  static inline bool key_ok_ = false;
  static inline std::once_flag key_once_;

  static void release(void* p) noexcept {
    if (tl_block_ == p) tl_block_ = nullptr;
    munmap(p, sizeof(T));
  }

  [[gnu::noinline, gnu::cold]] static T* attach_new() noexcept {
    tl_failed_ = true;  // until it works: one attempt per thread
    std::call_once(key_once_, [] { key_ok_ = pthread_key_create(&key_, release) == 0; });
    if (!key_ok_) return nullptr;
    void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    // A trivially constructible T is left as mmap gave it (zero, and not resident until touched).
    T* t;
    if constexpr (std::is_trivially_default_constructible_v<T>)
      t = new (p) T;
    else
      t = new (p) T();
    bool ok = true;
    if constexpr (requires { t->attach(); }) ok = t->attach();
    if (!ok || pthread_setspecific(key_, p) != 0) {
      munmap(p, sizeof(T));
      return nullptr;
    }
    tl_block_ = t;
    tl_failed_ = false;
    return t;
  }
};

}  // namespace cdsa
