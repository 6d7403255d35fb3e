// Captures the device's assert text ("Loss.cu:250: nll_loss_...: block: [0,0,0],
// thread: [2,0,0] Assertion `t >= 0 && t < n_classes` failed.") as the driver
// writes it to stderr, without touching the program's stderr.
//
// How: the real libcuda prints the lines through stdio (fprintf, vfprintf, fputs,
// fwrite, fputc, putc, _IO_putc, the _chk variants), and glibc's stdio writes with
// its internal __write, which an interposed write(2) never sees. So libcdsa.so
// interposes those stdio functions and write(2). While a thread is inside a
// wrapped driver call (DriverCallScope), what that call prints to stderr (fd 2)
// is also copied into a small per-thread buffer; every call is still forwarded
// to the real function with its own arguments, so the program's stderr bytes are
// exactly what they would be without cdsa. Outside driver calls a hook is one
// thread-local test and a jump.
//
// As soon as a thread's buffer holds a whole assert line it is published for
// the process (kept_device_text), so the fault report can read it whichever
// thread printed it, even while that thread's driver call is still running.
//
// Every hook forwards to the *next* definition (libc's, or another interposer's
// loaded after cdsa: next_libc), resolved in the constructor (prepare_stdio_hooks).
//
// Under RTLD_DEEPBIND (or any binding that gives libcuda libc's stdio past the
// global scope) libcuda's own imports would miss the hooks: bind_driver_stdio,
// run once when cdsa starts, points libcuda's GOT entries for these functions
// that hold libc's definition, or are not bound yet, at what the global scope
// resolves them to (cdsa's hooks, or an interposer before cdsa that forwards to
// them), as a plain load would have bound them. Every call still reaches libc
// with its own arguments: the program's bytes are unchanged. (A dlmopen
// namespace has its own libc: out of scope.)
//
// Contract: DriverCallScope is allocation-free and lock-free after a thread's
// first driver call. `captured_driver_stderr` returns what this thread's current
// driver call wrote to fd 2 (up to 8 KiB) and has not published.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace cdsa {

struct DriverCallScope {
  DriverCallScope() noexcept;
  ~DriverCallScope();
};

// Nesting depth of DriverCallScope on this thread (initial-exec TLS: no call to read it).
extern __thread int tl_driver_call_depth __attribute__((tls_model("initial-exec")));
// Whether this thread is inside a wrapped driver call: a wrapper reached from inside another (a second driver
// layer resolving libcuda with dlsym) passes straight through.
inline bool in_driver_call() noexcept { return tl_driver_call_depth > 0; }

std::string captured_driver_stderr();
// Text printed by a driver call that cdsa itself made (a breadcrumb write that
// met the fault first): kept until the report. Thread-safe; keeps the first.
void keep_device_text(const std::string& text);
std::string kept_device_text();
// Waits until some thread has published the device's assert text, at most until
// `deadline`, and only while another thread is inside a driver call (the one
// that may be printing it). True when text is there. For the fault path: a 710
// with no text yet may wait a few hundred ms for a concurrent call's print.
bool wait_for_device_text(std::chrono::steady_clock::time_point deadline) noexcept;
// Whether a thread other than the caller is inside a wrapped driver call now.
bool other_thread_in_driver_call() noexcept;
// For tests: whether this thread holds a slot of its own (claimed on its first driver call, returned when it
// exits; 512 threads alive at once hold one) rather than sharing the counter of the threads past them.
bool driver_call_slot_held() noexcept;

// Launches in flight: a thread between handing a launch to the driver and recording it (shim/record/launch.h records
// after the driver call returns). A kernel can fault, and another thread see the sticky error, inside that
// window: the fault report waits for them (wait_for_launches_in_flight) so the failing launch is in the ring.
// Bracket the real launch call with LaunchInFlight, from before the call until after record_launch (or the
// failure). Nests (the CUPTI callbacks inside a wrapped launch); lock-free, allocation-free, and a plain store
// to this thread's own cache line (the DriverCallScope slot) each way.
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

// This thread's in-flight flag (its DriverCallScope slot's), or null before the thread's first driver call.
extern __thread std::atomic<int>* tl_launch_flag __attribute__((tls_model("initial-exec")));
extern __thread int tl_launch_depth __attribute__((tls_model("initial-exec")));
struct LaunchInFlight {
  LaunchInFlight() noexcept { launch_submitting(); }
  ~LaunchInFlight() { launch_retired(); }
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
// Launches in flight on threads other than the caller (the faulting thread may itself be inside a launch
// wrapper: it is never counted).
int other_threads_launches_in_flight() noexcept;
// Waits until no other thread has a launch in flight, at most until `deadline`. Returns how many are left.
int wait_for_launches_in_flight(std::chrono::steady_clock::time_point deadline) noexcept;

// The constructor's part: looks up the next definition of every stdio/write hook.
void prepare_stdio_hooks() noexcept;

// The names of the stdio/write hooks (shim/exports.map.in exports them).
const char* const* stdio_hook_names(size_t* count) noexcept;

// Binds the stdio imports of the object holding `driver_function` (libcuda) as the global scope would (above).
// Returns how many GOT entries it changed. Not thread-safe against itself: call once, at start.
int bind_driver_stdio(const void* driver_function) noexcept;

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

// One parsed device assert line.
struct DeviceAssert {
  std::string file;
  int line = 0;
  std::string function;  // the function holding the assert (often the kernel)
  std::string message;   // the whole line
};
std::vector<DeviceAssert> parse_device_asserts(const std::string& text);

}  // namespace cdsa
