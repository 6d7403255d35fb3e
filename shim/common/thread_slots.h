// Which threads are inside a wrapped driver call, and which have a launch in flight: one slot per live thread,
// each on its own cache line, so entering and leaving is a plain store to memory no other thread writes. The fault
// path reads them to wait (bounded) for a launch another thread handed to the driver but has not recorded yet, and
// for the device's assert text a concurrent driver call may be printing.
//
// A thread claims its slot on its first driver call and returns it when it exits (a pthread key destructor), so
// the slots serve any number of threads over a run, 512 of them alive at once; threads beyond that share a
// counter.
//
// Contract: LaunchInFlight and mark_driver_call are lock-free and allocation-free (a thread's first use claims its
// slot: a CAS, once a pthread_setspecific). The readers (other_*, wait_for_*) are for the fault path.
//
//   LaunchInFlight in_flight;                    // before the real launch call
//   if (real(...) == CUDA_SUCCESS) record(...);  // the record is in the ring before the flag drops
#pragma once

#include <atomic>
#include <chrono>

namespace cdsa {

// Marks this thread inside (1) or outside (0) a wrapped driver call (DriverCallScope does, at its outermost level).
// Inline once the thread holds its slot: two stores to this thread's own TLS and cache line.
extern __thread std::atomic<int>* tl_busy_flag __attribute__((tls_model("initial-exec")));  // its slot's, or null
extern __thread bool tl_in_call __attribute__((tls_model("initial-exec")));  // what mark_driver_call last said
void mark_driver_call_slow(int inside) noexcept;  // before the thread's first call, and threads past the slots
inline void mark_driver_call(int inside) noexcept {
  if (__builtin_expect(tl_busy_flag == nullptr, 0)) return mark_driver_call_slow(inside);
  tl_in_call = inside != 0;
  tl_busy_flag->store(inside, std::memory_order_release);
}
// Whether a thread other than the caller is inside a wrapped driver call now.
bool other_thread_in_driver_call() noexcept;
// For tests: whether this thread holds a slot of its own (claimed on its first driver call, returned when it
// exits) rather than sharing the counter of the threads past them.
bool driver_call_slot_held() noexcept;

// Launches in flight: a thread between handing a launch to the driver and recording it (shim/record/launch.h
// records after the driver call returns). A kernel can fault, and another thread see the sticky error, inside that
// window: the fault report waits for them (wait_for_launches_in_flight) so the failing launch is in the ring.
// Bracket the real launch call with LaunchInFlight (the launch protocol, shim/record/launch.h, does), from before
// the call until after the record (or the failure). Nests (the CUPTI callbacks inside a wrapped launch); a plain
// store to this thread's own cache line each way.
// A hardware fence for the launch flags against what the driver (not C++ atomics) does. Not under
// ThreadSanitizer, which does not model fences: the happens-before it checks comes from the flags'
// release stores and acquire loads.
inline void launch_flag_fence(std::memory_order order) noexcept {
#if !defined(__SANITIZE_THREAD__)
  std::atomic_thread_fence(order);
#else
  (void)order;
#endif
}

// This thread's in-flight flag (its slot's), or null before the thread's first driver call.
extern __thread std::atomic<int>* tl_launch_flag __attribute__((tls_model("initial-exec")));
extern __thread int tl_launch_depth __attribute__((tls_model("initial-exec")));
struct LaunchInFlight {
  LaunchInFlight() noexcept { launch_submitting(); }
  ~LaunchInFlight() { launch_retired(); }
  LaunchInFlight(const LaunchInFlight&) = delete;
  LaunchInFlight& operator=(const LaunchInFlight&) = delete;
  static void launch_submitting() noexcept {
    if (tl_launch_depth++ != 0) return;
    if (__builtin_expect(tl_launch_flag == nullptr, 0)) return submitting_slow();
    tl_launch_flag->store(1, std::memory_order_relaxed);
    // The flag must be visible before anything the driver then stores to submit the launch (so before the
    // kernel can run, fault, and another thread see that): a store-store barrier; free on x86, dmb on Arm.
    launch_flag_fence(std::memory_order_release);
  }
  static void launch_retired() noexcept {
    if (tl_launch_depth <= 0 || --tl_launch_depth != 0) return;
    // Release: whoever reads 0 here also sees the launch's record in the ring.
    if (__builtin_expect(tl_launch_flag == nullptr, 0)) return retired_slow();
    tl_launch_flag->store(0, std::memory_order_release);
  }

 private:
  static void submitting_slow() noexcept;  // claims the thread's slot first; threads past the slots share a count
  static void retired_slow() noexcept;
};
// Gives up this thread's marks (inside a driver call, a launch in flight) for the life of the object, and puts
// them back after: a thread that waits for another thread's fault report (shim/fault/fault.cc) must not make
// that report wait for it (wait_for_launches_in_flight, wait_for_device_text). Lock-free, allocation-free.
class CallMarksReleased {
 public:
  CallMarksReleased() noexcept;
  ~CallMarksReleased();
  CallMarksReleased(const CallMarksReleased&) = delete;
  CallMarksReleased& operator=(const CallMarksReleased&) = delete;

 private:
  int busy_ = 0, launching_ = 0;
  bool shared_busy_ = false, shared_launching_ = false;
};

// Launches in flight on threads other than the caller (the faulting thread may itself be inside a launch
// wrapper: it is never counted).
int other_threads_launches_in_flight() noexcept;
// Waits until no other thread has a launch in flight, at most until `deadline`. Returns how many are left.
int wait_for_launches_in_flight(std::chrono::steady_clock::time_point deadline) noexcept;

}  // namespace cdsa
