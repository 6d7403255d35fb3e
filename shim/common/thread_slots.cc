#include "shim/common/thread_slots.h"

#include <pthread.h>
#include <ctime>
#include <mutex>

namespace cdsa {

__thread std::atomic<int>* tl_launch_flag __attribute__((tls_model("initial-exec"))) = nullptr;
__thread int tl_launch_depth __attribute__((tls_model("initial-exec"))) = 0;
__thread std::atomic<int>* tl_busy_flag __attribute__((tls_model("initial-exec"))) = nullptr;
__thread bool tl_in_call __attribute__((tls_model("initial-exec"))) = false;

namespace {

constexpr int kBusySlots = 512;
// One live thread's flags: inside a driver call, a launch in flight.
struct alignas(64) BusySlot {
  std::atomic<int> busy{0};
  std::atomic<int> launching{0};
  std::atomic<bool> owned{false};  // a live thread holds it
};
BusySlot g_busy[kBusySlots];
std::atomic<int> g_busy_claimed{0};  // slots ever claimed: only g_busy[0, min(this, kBusySlots)) is scanned
std::atomic<int> g_busy_shared{0};
std::atomic<int> g_launching_shared{0};
[[gnu::tls_model("initial-exec")]] thread_local BusySlot* tl_slot = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local bool tl_shared = false;
pthread_key_t g_slot_key;
bool g_slot_key_ok = false;
std::once_flag g_slot_key_once;

// At thread exit: the slot is free for the next thread. Its flags are cleared too, for a thread that ended inside
// a driver call (pthread_exit or a cancellation there): it is in no call now. A driver call the exiting thread still
// makes (from a later thread-exit destructor) uses the shared counters: a slot claimed then could not be returned.
void return_slot(void* p) noexcept {
  auto* slot = static_cast<BusySlot*>(p);
  if (tl_slot == slot) {
    tl_slot = nullptr;
    tl_launch_flag = nullptr;
    tl_busy_flag = nullptr;
    tl_shared = true;
  }
  slot->busy.store(0, std::memory_order_relaxed);
  slot->launching.store(0, std::memory_order_relaxed);
  slot->owned.store(false, std::memory_order_release);
}

bool own(BusySlot& slot) {
  bool expected = false;
  return !slot.owned.load(std::memory_order_relaxed) &&
         slot.owned.compare_exchange_strong(expected, true, std::memory_order_acquire);
}

BusySlot* take_slot() {
  std::call_once(g_slot_key_once, [] { g_slot_key_ok = pthread_key_create(&g_slot_key, return_slot) == 0; });
  if (!g_slot_key_ok) return nullptr;  // a slot could never be returned: share the counter
  // A slot never used, else one a finished thread returned.
  if (g_busy_claimed.load(std::memory_order_relaxed) < kBusySlots) {
    int i = g_busy_claimed.fetch_add(1, std::memory_order_acq_rel);
    if (i < kBusySlots && own(g_busy[i])) return &g_busy[i];
  }
  for (BusySlot& slot : g_busy)
    if (own(slot)) return &slot;
  return nullptr;
}

[[gnu::noinline, gnu::cold]] void claim_slot_slow() {
  BusySlot* slot = take_slot();
  if (slot && pthread_setspecific(g_slot_key, slot) == 0) {
    tl_slot = slot;
    tl_launch_flag = &slot->launching;
    tl_busy_flag = &slot->busy;
  } else {
    if (slot) slot->owned.store(false, std::memory_order_release);
    tl_shared = true;
  }
}

inline void claim_slot() {
  if (__builtin_expect(tl_slot == nullptr && !tl_shared, 0)) claim_slot_slow();
}

}  // namespace

void mark_driver_call_slow(int inside) noexcept {
  claim_slot();
  tl_in_call = inside != 0;
  if (tl_slot)
    tl_slot->busy.store(inside, std::memory_order_release);
  else
    g_busy_shared.fetch_add(inside ? 1 : -1, std::memory_order_acq_rel);
}

bool other_thread_in_driver_call() noexcept {
  int claimed = g_busy_claimed.load(std::memory_order_acquire);
  if (claimed > kBusySlots) claimed = kBusySlots;
  for (int i = 0; i < claimed; ++i)
    if (&g_busy[i] != tl_slot && g_busy[i].busy.load(std::memory_order_acquire)) return true;
  int shared = g_busy_shared.load(std::memory_order_acquire) - (tl_shared && tl_in_call ? 1 : 0);
  return shared > 0;
}

bool driver_call_slot_held() noexcept { return tl_slot != nullptr; }

void LaunchInFlight::submitting_slow() noexcept {
  claim_slot();
  if (tl_launch_flag) {
    tl_launch_flag->store(1, std::memory_order_relaxed);
  } else {
    g_launching_shared.fetch_add(1, std::memory_order_relaxed);
  }
  launch_flag_fence(std::memory_order_release);
}

void LaunchInFlight::retired_slow() noexcept { g_launching_shared.fetch_sub(1, std::memory_order_release); }

CallMarksReleased::CallMarksReleased() noexcept {
  if (tl_slot) {
    busy_ = tl_slot->busy.exchange(0, std::memory_order_acq_rel);
    launching_ = tl_slot->launching.exchange(0, std::memory_order_acq_rel);
    return;
  }
  // A thread past the slots counts in the shared counters while it is inside a call or a launch.
  shared_busy_ = tl_shared && tl_in_call;
  shared_launching_ = tl_launch_depth > 0;
  if (shared_busy_) g_busy_shared.fetch_sub(1, std::memory_order_acq_rel);
  if (shared_launching_) g_launching_shared.fetch_sub(1, std::memory_order_acq_rel);
}

CallMarksReleased::~CallMarksReleased() {
  if (tl_slot) {
    tl_slot->busy.store(busy_, std::memory_order_release);
    tl_slot->launching.store(launching_, std::memory_order_release);
    return;
  }
  if (shared_busy_) g_busy_shared.fetch_add(1, std::memory_order_acq_rel);
  if (shared_launching_) g_launching_shared.fetch_add(1, std::memory_order_acq_rel);
}

int other_threads_launches_in_flight() noexcept {
  // The caller has just seen the fault (a load through the driver): read the flags after it.
  launch_flag_fence(std::memory_order_seq_cst);
  int n = 0;
  int claimed = g_busy_claimed.load(std::memory_order_acquire);
  if (claimed > kBusySlots) claimed = kBusySlots;
  for (int i = 0; i < claimed; ++i)
    if (&g_busy[i] != tl_slot && g_busy[i].launching.load(std::memory_order_acquire)) ++n;
  int shared = g_launching_shared.load(std::memory_order_acquire) - (tl_shared && tl_launch_depth > 0 ? 1 : 0);
  return n + (shared > 0 ? shared : 0);
}

int wait_for_launches_in_flight(std::chrono::steady_clock::time_point deadline) noexcept {
  for (;;) {
    int n = other_threads_launches_in_flight();
    if (n == 0 || std::chrono::steady_clock::now() >= deadline) return n;
    timespec ts{0, 100000};  // 0.1 ms: recording a launch takes microseconds
    nanosleep(&ts, nullptr);
  }
}

}  // namespace cdsa
