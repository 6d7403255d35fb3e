#include "shim/fault/fault_signals.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "report/fault_report.h"
#include "shim/common/log.h"

namespace cdsa {
namespace {

// How long a handler on another thread waits for the reporting thread's full report, and how long its write to
// a stderr that does not take bytes may block.
constexpr int kSignalWaitMs = 3000;
constexpr int kWriteWaitMs = 1000;

constexpr int kSignals[] = {SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGINT, SIGQUIT, SIGSEGV, SIGTERM};
const char* signal_name(int sig) {
  switch (sig) {
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGSEGV: return "SIGSEGV";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

struct PreparedText {
  size_t len;
  char data[1];
};
std::atomic<const PreparedText*> g_prepared{nullptr};

// Who prints: nothing yet, the reporting thread (its full report), a handler (the prepared text), or finished.
enum Out : int { kNone, kReporterWriting, kHandlerWriting, kHandlerWrote, kFinished };
std::atomic<int> g_out{kNone};
std::atomic<long> g_reporter_tid{0};
std::atomic<int> g_armed_pid{0};  // the process that armed: a forked child's handlers chain at once
std::atomic<bool> g_armed{false};
// Handlers running now on threads other than the reporter's: the reporter, once finished, waits for them to
// chain (bounded) before it returns to the program, so a SIGTERM that arrived mid-report still ends the process
// as it would have, not the program's own exit a moment later.
std::atomic<int> g_handlers_running{0};
std::atomic<bool> g_handler_ran{false};
std::atomic<bool> g_installed[NSIG];
struct sigaction g_prev[NSIG];  // what was installed before cdsa's handler (read by the handler)
struct sigaction g_ours;
// Held while g_prev and the installed handlers change (recheck on several waiting threads, the restore at the end).
std::atomic<bool> g_changing{false};

long this_tid() { return syscall(SYS_gettid); }

long now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

void sleep_ms(long ms) {
  timespec ts{0, ms * 1000000L};
  nanosleep(&ts, nullptr);
}

// Waits, at most `ms`, while `keep_waiting(state)` holds.
template <typename Pred>
void wait_while(long ms, Pred keep_waiting) {
  long until = now_ms() + ms;
  while (keep_waiting(g_out.load(std::memory_order_acquire)) && now_ms() < until) sleep_ms(1);
}

size_t append(char* buf, size_t at, size_t cap, const char* s) {
  while (*s && at < cap) buf[at++] = *s++;
  return at;
}

// The program's handler for `sig`, run as the kernel would have run it had cdsa's not been there: with
// SA_RESETHAND the disposition is the default from its start on; while it runs the thread's mask is the
// interrupted code's, plus the handler's sa_mask, plus the signal itself unless SA_NODEFER (not cdsa's mask,
// which blocks all its signals). Only async-signal-safe calls.
void run_program_handler(int sig, const struct sigaction& prev, siginfo_t* info, void* uc) {
  if (prev.sa_flags & SA_RESETHAND) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    g_installed[sig].store(false, std::memory_order_release);  // nothing of cdsa's left to restore there
  }
  sigset_t mask, ours;
  if (uc)
    mask = static_cast<ucontext_t*>(uc)->uc_sigmask;
  else
    sigemptyset(&mask);
  sigorset(&mask, &mask, &prev.sa_mask);
  if (!(prev.sa_flags & SA_NODEFER)) sigaddset(&mask, sig);
  pthread_sigmask(SIG_SETMASK, &mask, &ours);
  if (prev.sa_flags & SA_SIGINFO)
    prev.sa_sigaction(sig, info, uc);
  else
    prev.sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &ours, nullptr);
}

void chain(int sig, siginfo_t* info, void* uc) {
  const struct sigaction prev = g_prev[sig];  // a copy: a recheck may change g_prev meanwhile
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) run_program_handler(sig, prev, info, uc);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;  // the program's choice (set after cdsa armed: recheck kept it)
  if (prev.sa_handler != SIG_DFL) {
    run_program_handler(sig, prev, info, uc);
    return;
  }
  // The default action, as without cdsa: restore it and deliver the signal again. A fault the CPU raised
  // (si_code > 0) comes back by itself when the instruction runs again; any other is re-sent to this thread and
  // arrives as soon as this handler returns (it is blocked while the handler runs).
  sigaction(sig, &prev, nullptr);
  const bool hardware = (sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) && info && info->si_code > 0;
  if (!hardware) syscall(SYS_tgkill, getpid(), this_tid(), sig);
}

void on_fatal_signal(int sig, siginfo_t* info, void* uc) {
  const int saved_errno = errno;
  if (g_armed_pid.load(std::memory_order_relaxed) == getpid() && g_out.load(std::memory_order_acquire) != kFinished) {
    const bool reporter = this_tid() == g_reporter_tid.load(std::memory_order_relaxed);
    if (!reporter) {
      g_handlers_running.fetch_add(1, std::memory_order_acq_rel);
      g_handler_ran.store(true, std::memory_order_release);
    }
    // The reporting thread runs on while this one waits: let it finish, bounded.
    if (!reporter) wait_while(kSignalWaitMs, [](int s) { return s == kNone || s == kReporterWriting; });
    int expected = kNone;
    const PreparedText* t = g_prepared.load(std::memory_order_acquire);  // none under CDSA_QUIET=1
    if (t && g_out.compare_exchange_strong(expected, kHandlerWriting, std::memory_order_acq_rel)) {
      write_stderr_bounded(t->data, t->len, kWriteWaitMs);
      char line[256];
      size_t n = append(line, 0, sizeof line, "cdsa: ");
      n = append(line, n, sizeof line, signal_name(sig));
      n = append(line, n, sizeof line,
                 " arrived before the report was finished: above is what was known then (native frames not "
                 "symbolized)\n");
      n = append(line, n, sizeof line, report::kReportClosingRule);
      write_stderr_bounded(line, n, kWriteWaitMs);
      g_out.store(kHandlerWrote, std::memory_order_release);
    } else if (expected == kReporterWriting && !reporter) {
      wait_while(kSignalWaitMs, [](int s) { return s == kReporterWriting; });  // it is writing now: let it end
    }
    if (!reporter) {
      chain(sig, info, uc);
      g_handlers_running.fetch_sub(1, std::memory_order_acq_rel);
      errno = saved_errno;
      return;
    }
  }
  chain(sig, info, uc);
  errno = saved_errno;
}

// Whether a thread of this process has one of the watched signals pending (its own SigPnd, or the process's
// ShdPnd), read from /proc/self/task/*/status. A signal sent to another thread while cdsa's handler was installed
// waits there until that thread runs: without cdsa the kernel would have ended the process at once (a fatal
// default action is taken when the signal is sent), so the reporting thread must not return to the program,
// which might exit with its own status first, while such a signal is still on its way. -1: /proc unreadable.
int watched_signal_pending() {
  unsigned long long watched = 0;
  for (int sig : kSignals) watched |= 1ULL << (sig - 1);
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return -1;
  int found = 0;
  while (dirent* e = readdir(tasks)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[sizeof "/proc/self/task//status" + sizeof e->d_name];
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // the thread ended
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    for (const char* key : {"\nSigPnd:", "\nShdPnd:"}) {
      const char* at = strstr(buf, key);
      if (at && (strtoull(at + strlen(key), nullptr, 16) & watched)) found = 1;
    }
    if (found) break;
  }
  closedir(tasks);
  return found;
}

bool ours(const struct sigaction& a) { return (a.sa_flags & SA_SIGINFO) && a.sa_sigaction == on_fatal_signal; }

}  // namespace

void prepare_fault_text(const std::string& text) noexcept {
  size_t bytes = sizeof(PreparedText) + text.size();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  auto* t = static_cast<PreparedText*>(p);
  t->len = text.size();
  memcpy(t->data, text.data(), text.size());
  // The one before stays mapped: a handler may be reading it (a few KiB, once per process).
  g_prepared.store(t, std::memory_order_release);
}

void arm_fault_signals() noexcept {
  if (g_armed.exchange(true)) return;
  g_reporter_tid.store(this_tid(), std::memory_order_relaxed);
  g_armed_pid.store(getpid(), std::memory_order_relaxed);
  memset(&g_ours, 0, sizeof g_ours);
  g_ours.sa_sigaction = on_fatal_signal;
  g_ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&g_ours.sa_mask);
  for (int sig : kSignals) sigaddset(&g_ours.sa_mask, sig);  // one of cdsa's handlers at a time per thread
  for (int sig : kSignals) {
    struct sigaction cur;
    if (sigaction(sig, nullptr, &cur) != 0) continue;
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) continue;  // ignored: stays ignored
    g_prev[sig] = cur;
    if (sigaction(sig, &g_ours, nullptr) == 0) g_installed[sig].store(true, std::memory_order_release);
  }
}

void recheck_fault_signals() noexcept {
  if (!g_armed.load(std::memory_order_acquire) || g_out.load(std::memory_order_acquire) == kFinished) return;
  if (g_changing.exchange(true, std::memory_order_acquire)) return;  // another waiting thread is at it
  for (int sig : kSignals) {
    if (g_out.load(std::memory_order_acquire) == kFinished) break;
    if (!g_installed[sig].load(std::memory_order_acquire)) continue;
    struct sigaction cur;
    if (sigaction(sig, nullptr, &cur) != 0 || ours(cur)) continue;
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) continue;  // the program ignores it now
    g_prev[sig] = cur;  // the program's new handler: chained after cdsa's part
    sigaction(sig, &g_ours, nullptr);
  }
  g_changing.store(false, std::memory_order_release);
}

bool begin_full_report_output() noexcept {
  int expected = kNone;
  if (g_out.compare_exchange_strong(expected, kReporterWriting, std::memory_order_acq_rel)) return true;
  wait_while(kSignalWaitMs, [](int s) { return s == kHandlerWriting; });  // never two texts interleaved
  return false;
}

void fault_report_finished() noexcept {
  g_out.store(kFinished, std::memory_order_release);
  if (!g_armed.load(std::memory_order_acquire)) return;
  if (g_handler_ran.load(std::memory_order_acquire)) {
    // A handler on another thread waited for this report: let it chain (the default action ends the process as
    // soon as that handler returns) before this thread goes back to the program.
    long until = now_ms() + kSignalWaitMs;
    while (g_handlers_running.load(std::memory_order_acquire) > 0 && now_ms() < until) sleep_ms(1);
  }
  while (g_changing.exchange(true, std::memory_order_acquire)) sleep_ms(1);  // a recheck ends within microseconds
  for (int sig : kSignals) {
    if (!g_installed[sig].exchange(false)) continue;
    struct sigaction cur;
    if (sigaction(sig, nullptr, &cur) == 0 && ours(cur)) sigaction(sig, &g_prev[sig], nullptr);
  }
  g_changing.store(false, std::memory_order_release);
  // A signal sent to another thread during the report (or re-sent by a handler that chained to the default
  // action) may still be pending there, its thread not yet scheduled: let it arrive before this thread goes back
  // to the program (bounded: a signal every thread blocks stays pending for good).
  const int pending = watched_signal_pending();
  if (pending < 0) {
    if (g_handler_ran.load(std::memory_order_acquire)) sleep_ms(50);  // no /proc: a short grace, as before
    return;
  }
  if (pending == 0) return;
  long until = now_ms() + kSignalWaitMs;
  while (now_ms() < until && watched_signal_pending() > 0) sleep_ms(1);
}

}  // namespace cdsa
