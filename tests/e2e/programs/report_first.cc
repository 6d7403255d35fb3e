// End-to-end cases for the report before the job's death and for hostile outputs, on the simulated driver
// (tests/e2e/test_report_first.py, tests/e2e/test_soak.py). The program's own lines go to stdout, so a test can
// hand it a hostile stderr without the program itself blocking or dying on it.
#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sim_program.h"

const e2e::Failure e2e::kFailure{1, true};

namespace {

CUcontext g_ctx;

using e2e::check;
using e2e::fn;
using e2e::nll_args;
using e2e::NllArgs;

void init() { g_ctx = e2e::init_primary(); }

__attribute__((noinline)) void launch_bad_loss(CUfunction f, NllArgs& a, CUstream s) {
  check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, a.get(), nullptr), "cuLaunchKernel");  // NLL-SITE
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void launch_illegal_address() {
  check(cuLaunchKernel(fn("illegal_address"), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),  // ILLEGAL-SITE
        "cuLaunchKernel");
  asm volatile("" ::: "memory");
}

// ---- case: the 700 (no device text: the driver prints nothing), for hostile outputs ----
int case_illegal_address() {
  init();
  launch_illegal_address();
  CUresult r = cuCtxSynchronize();
  printf("program: cuCtxSynchronize returned %d\n", static_cast<int>(r));
  fflush(stdout);
  return r == CUDA_SUCCESS ? 0 : 3;
}

// ---- case: a signal arrives while the report is being built ----
// The report asks a shared cudart for its version (cudaRuntimeGetVersion, looked up with dlsym(RTLD_DEFAULT))
// while it builds the trace (in memory, before the report is printed and the file written): this program's
// own definition sends SIGTERM from there, to the reporting thread itself ("self") or to another thread
// ("other"), as a launcher's SIGTERM arriving mid-report would.
std::string g_term_mode;
pthread_t g_other;
std::atomic<bool> g_term_sent{false};

void* other_thread(void*) {
  for (;;) pause();
  return nullptr;
}

// "handler": the program's own SIGTERM handler, installed before the fault, runs after cdsa's part and decides the
// exit status.
void program_term_handler(int) {
  const char msg[] = "program: my SIGTERM handler ran\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(7);
}

// "oneshot": a handler installed with SA_RESETHAND | SA_NODEFER and SIGUSR1 in its sa_mask, as crash handlers that
// clean up and re-raise are. It says what it sees (the disposition reset, which signals are blocked) and raises
// SIGTERM again, which ends the process at once when run as the kernel runs it. Without cdsa (no report, so no
// SIGTERM from it) the program raises SIGTERM itself after the failing call: the two runs' lines must be equal.
bool blocked(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

void program_oneshot_handler(int sig) {
  struct sigaction cur;
  sigaction(sig, nullptr, &cur);
  char line[160];
  int n = snprintf(line, sizeof line,
                   "program: oneshot handler: disposition default %d, blocked: SIGTERM %d SIGUSR1 %d SIGINT %d "
                   "SIGABRT %d\n",
                   !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL, blocked(SIGTERM), blocked(SIGUSR1),
                   blocked(SIGINT), blocked(SIGABRT));
  (void)!write(1, line, n);
  raise(sig);
  const char after[] = "program: raise returned in the oneshot handler\n";
  (void)!write(1, after, sizeof after - 1);
  _exit(8);
}

int case_term(const char* mode) {
  g_term_mode = mode;
  if (g_term_mode == "handler") signal(SIGTERM, program_term_handler);
  if (g_term_mode == "oneshot") {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_handler = program_oneshot_handler;
    a.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&a.sa_mask);
    sigaddset(&a.sa_mask, SIGUSR1);
    sigaction(SIGTERM, &a, nullptr);
  }
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_create(&g_other, nullptr, other_thread, nullptr);
  if (g_term_mode == "other") pthread_sigmask(SIG_BLOCK, &term, nullptr);  // only the other thread takes it
  init();
  NllArgs a = nll_args(10);
  launch_bad_loss(fn("nll_loss_forward_reduce_cuda_kernel_2d"), a, nullptr);
  CUresult r = cuCtxSynchronize();
  if (g_term_mode == "oneshot" && !g_term_sent.exchange(true)) raise(SIGTERM);  // no report sent it: without cdsa
  printf("program: cuCtxSynchronize returned %d (the process should have ended)\n", static_cast<int>(r));
  fflush(stdout);
  return 4;
}

// ---- case: soak: THREADS threads x N launches each, with forks and exec'd children; 90% through, thread 1
// launches a kernel that asserts, on its own stream, and synchronizes it while the others keep launching (their
// calls fail from then on: they stop) ----
std::atomic<int> g_failures{0};  // forks or exec'd children that went wrong
std::atomic<int> g_surfaced{0};  // the faulting thread's synchronize returned the assert

__attribute__((noinline)) void soak_fault(CUstream s) {
  NllArgs a = nll_args(10);
  launch_bad_loss(fn("nll_loss_forward_reduce_cuda_kernel_2d"), a, s);  // SOAK-FAULT
  if (cuStreamSynchronize(s) == CUDA_ERROR_ASSERT) g_surfaced.store(1);
}

void soak_worker(int index, long launches, const char* self) {
  if (cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) return;
  CUstream s;
  CUdeviceptr buf;
  if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS || cuMemAlloc(&buf, 64 * sizeof(float)) != CUDA_SUCCESS)
    return;
  CUfunction fill = fn("fill_f32");
  int32_t n = 64;
  float v = static_cast<float>(index);
  void* params[3] = {&buf, &n, &v};
  for (long i = 0; i < launches; ++i) {
    if (index == 1 && i == launches - launches / 10) return soak_fault(s);
    if (cuLaunchKernel(fill, 1, 1, 1, 64, 1, 1, 0, s, params, nullptr) != CUDA_SUCCESS) return;  // after the fault
    if (i % 25000 == 10000) {
      pid_t pid = fork();
      if (pid == 0) {
        // A forked child: one exits at once, one execs this program's quiet child (CUDA use without a fault).
        if (index % 2 == 0) _exit(0);
        execl(self, self, "child", static_cast<char*>(nullptr));
        _exit(127);
      }
      int status = 0;
      if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        g_failures.fetch_add(1);
    }
    if (i % 4096 == 0 && cuStreamSynchronize(s) != CUDA_SUCCESS) return;
  }
}

int case_soak(int threads, long launches, const char* self) {
  init();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(soak_worker, t, launches, self);
  for (auto& t : pool) t.join();
  printf("program: %d threads x %ld launches, fault surfaced %d, %d child failures\n", threads, launches,
         g_surfaced.load(), g_failures.load());
  fflush(stdout);
  return g_failures.load() ? 6 : (g_surfaced.load() ? 3 : 0);
}

// ---- case: the failing launch's record is lost: a slow kernel, then the asserting one on stream A, then more
// launches on stream B than the ring (CDSA_RING_SIZE=1024) keeps, all before the assert runs ----
int case_lost_record() {
  init();
  CUstream a, b;
  check(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  NllArgs args = nll_args(10);  // allocations first: the driver may synchronize in them
  CUdeviceptr buf;
  check(cuMemAlloc(&buf, 16 * sizeof(float)), "cuMemAlloc");
  int32_t n = 16;
  float v = 1;
  void* params[3] = {&buf, &n, &v};
  CUfunction fill = fn("fill_f32"), nll = fn("nll_loss_forward_reduce_cuda_kernel_2d"), sleep = fn("sleep_us");
  int64_t us = 300000;
  void* sleep_params[1] = {&us};
  check(cuLaunchKernel(sleep, 1, 1, 1, 1, 1, 1, 0, a, sleep_params, nullptr), "cuLaunchKernel");
  launch_bad_loss(nll, args, a);
  for (int i = 0; i < 2048; ++i) check(cuLaunchKernel(fill, 1, 1, 1, 16, 1, 1, 0, b, params, nullptr), "fill");
  check(cuStreamSynchronize(b), "cuStreamSynchronize(b)");
  CUresult r = cuStreamSynchronize(a);
  printf("program: cuStreamSynchronize(a) returned %d\n", static_cast<int>(r));
  fflush(stdout);
  return r == CUDA_SUCCESS ? 0 : 3;
}

int case_child() {
  init();
  CUdeviceptr buf;
  check(cuMemAlloc(&buf, 16 * sizeof(float)), "cuMemAlloc");
  int32_t n = 16;
  float v = 1;
  void* params[3] = {&buf, &n, &v};
  check(cuLaunchKernel(fn("fill_f32"), 1, 1, 1, 16, 1, 1, 0, nullptr, params, nullptr), "cuLaunchKernel");
  check(cuCtxSynchronize(), "cuCtxSynchronize");
  return 0;
}

}  // namespace

// Found by the report with dlsym(RTLD_DEFAULT) (the program is linked with -rdynamic); see case_term.
extern "C" __attribute__((visibility("default"))) int cudaRuntimeGetVersion(int* v) {
  if (!g_term_mode.empty() && !g_term_sent.exchange(true)) {
    if (g_term_mode == "self" || g_term_mode == "handler" || g_term_mode == "oneshot")
      raise(SIGTERM);
    else
      pthread_kill(g_other, SIGTERM);
  }
  *v = 13000;
  return 0;
}

int main(int argc, char** argv) {
  std::string c = argc > 1 ? argv[1] : "";
  if (c == "illegal-address") return case_illegal_address();
  if (c == "term" && argc > 2) return case_term(argv[2]);
  if (c == "soak" && argc > 3) return case_soak(atoi(argv[2]), atol(argv[3]), argv[0]);
  if (c == "child") return case_child();
  if (c == "lost-record") return case_lost_record();
  fprintf(stderr, "usage: %s illegal-address | term self|other|handler|oneshot | soak THREADS LAUNCHES | child | lost-record\n", argv[0]);
  return 2;
}
