// A signal whose default action ends the program, blocked on this thread for the length of a write that may raise it
// (SIGPIPE: a pipe whose reader is gone; SIGXFSZ: a file-size limit or a full quota), so that cdsa's own writes never
// end or change the program: blocked while the object lives, the one the write raised taken back (take_back) unless
// one was pending already (that one is the program's), then the thread's mask restored as it was.
//
// Contract: async-signal-safe (pthread_sigmask, sigpending, sigtimedwait only), no allocation; the calling thread's
// mask only. Used by the report's write to stderr (log.h, also from signal handlers) and the trace file's write.
//
//   { BlockedSignal pipe(SIGPIPE); ...write...; if (it_raised_pipe) pipe.take_back(); }  // mask as before
#pragma once

#include <pthread.h>
#include <signal.h>
#include <cerrno>
#include <ctime>

namespace cdsa {

class BlockedSignal {
 public:
  explicit BlockedSignal(int sig) noexcept : sig_(sig) {
    sigemptyset(&set_);
    sigaddset(&set_, sig);
    pthread_sigmask(SIG_BLOCK, &set_, &old_mask_);
    was_pending_ = pending_now();
  }
  ~BlockedSignal() { pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr); }
  BlockedSignal(const BlockedSignal&) = delete;
  BlockedSignal& operator=(const BlockedSignal&) = delete;

  // Whether the signal is pending now (for this thread or the process).
  bool pending_now() const noexcept {
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    return sigismember(&pending, sig_) == 1;
  }
  // Consumes the signal the write raised, unless one was pending before it.
  void take_back() noexcept {
    if (was_pending_) return;
    timespec zero{0, 0};
    while (sigtimedwait(&set_, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }

 private:
  int sig_;
  sigset_t set_, old_mask_;
  bool was_pending_ = false;
};

}  // namespace cdsa
