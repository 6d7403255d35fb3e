// The launcher summary: a process tree's root (the launcher: torchrun, srun, mpirun, a shell script, the command
// `cdsa run` became) prints at its exit the merged verdict of the traces its descendants wrote, when one of them
// holds a fault (docs/launchers.md).
//
// The tree is named by CDSA_SESSION=host:pid:ms. The first process that loads libcdsa.so (enabled) without it in
// its environment sets it there, so every descendant inherits it, and is the tree's root; a process whose
// CDSA_SESSION names its own host and pid is the root too (the root exec'd another program: same pid). Every trace
// records its process's session (process.session). At the root's exit (only the root: a forked copy that
// inherited the handler does nothing) libcdsa.so lists the files the trace pattern in effect can name (each %
// token a wildcard, the "-N" of a taken name too), keeps those written since the session began whose first bytes
// name this session and, when one of them holds a fault written by a process other than the root (the root's own
// report is already out), runs `cdsa merge --launcher-summary --session ID FILES...` (the CLI next to libcdsa.so,
// CDSA_DISABLE=1 in its environment), which prints on fd 2. Nothing is printed when no descendant faulted, under CDSA_QUIET=1 or
// CDSA_TRACE=off; the exit status stays the program's own; the CLI is given kSummarySeconds, then killed (one
// line says so). Without the CLI next to libcdsa.so, one line names the files to merge.
//
// Contract: launcher_session_init runs once, from libcdsa.so's constructor; it allocates, sets one environment
// variable and registers one atexit handler, nothing else (no thread). It starts a session only while the process
// has one thread (a copy loaded later, by dlopen or CUDA_INJECTION64_PATH, never calls setenv: another thread's
// getenv could race with it).
#pragma once

namespace cdsa {

void launcher_session_init() noexcept;

}  // namespace cdsa
