// What is known about a fault still comes out when the process is ended by a signal while the report is being
// built: abort() from a watchdog thread (PyTorch's NCCL watchdog), SIGTERM from a launcher, SIGSEGV inside the
// program or inside the report's own symbolization.
//
// How: the fault path (shim/fault/fault.cc) renders the report's text in stages as soon as it knows more (the
// error and where it surfaced at once; the verdict with Python frames and unsymbolized native frames before the
// slow symbolization) and hands each stage to `prepare_fault_text`, which copies it into memory it maps then.
// `arm_fault_signals`, at the first fault, installs a handler for SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGINT,
// SIGQUIT, SIGSEGV and SIGTERM (those the program does not ignore) that builds nothing: on a thread other than
// the reporter's it waits, bounded (kSignalWaitMs), for the full report; if it is not out by then (or the signal
// hit the reporting thread itself, which cannot wait on itself) it writes the last prepared text with raw
// write(2) calls (write_stderr_bounded). Then it chains: to the handler the program had installed (cdsa's part
// comes first, also before Python's faulthandler, which never returns), or, where the disposition was the
// default, it restores that and re-raises, so the process ends as it would have and the exit status is unchanged.
// A signal is never swallowed.
//
// Ordering against handlers the program installs later: a handler installed after cdsa's replaces it (cdsa does
// not interpose sigaction). `recheck_fault_signals`, which the threads waiting for the report call every few ms,
// puts cdsa's handler back in front and chains to the new one; once the report is out
// (`fault_report_finished`) the previous handlers are restored wherever cdsa's is still installed, so the program
// after the report runs with exactly its own.
//
// Contract: every function but the handler runs on the fault path (may allocate, may call sigaction). The
// handler is async-signal-safe: no allocation, no lock, only atomics, clock_gettime, nanosleep, poll, write,
// sigaction, sigprocmask and tgkill.
#pragma once

#include <string>

namespace cdsa {

// Publishes `text` as what a signal handler prints when the full report is not out. Later calls replace it.
void prepare_fault_text(const std::string& text) noexcept;
// Installs the handlers (once per process; the reporting thread is the caller).
void arm_fault_signals() noexcept;
// Puts cdsa's handler back in front of one the program installed since (no-op before arming or after the end).
void recheck_fault_signals() noexcept;
// The reporting thread is about to print the full report: false when a signal handler printed (or is printing)
// the prepared text instead. The caller prints the full report either way (the process may have survived the
// signal: SIGINT under Python).
bool begin_full_report_output() noexcept;
// The full report is printed and the trace written (or given up): handlers chain at once from now, and the
// previous handlers are restored.
void fault_report_finished() noexcept;

}  // namespace cdsa
