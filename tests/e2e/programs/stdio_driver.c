/* A stand-in for a driver that prints the device's assert text through stdio,
 * as the real libcuda does (fprintf/fputs/fwrite/fputc/putc on stderr), from
 * whichever thread's call flushes the device printf buffer. The program gets
 * these functions with dlsym, so cdsa hands back its wrappers and the calls run
 * inside its driver-call scope. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

static volatile int g_faulted;

/* cuStreamQuery(0): prints ordinary lines through every stdio route and succeeds.
 * cuStreamQuery(1): prints the assert lines (as libcuda flushes them) and marks the fault. */
CUresult cuStreamQuery(CUstream s) {
  if (s == (CUstream)1) {
    fprintf(stderr, "%s:%d: %s: block: [0,0,0], thread: [%d,0,0] Assertion `%s` failed.\n", "Loss.cu", 250,
            "nll_loss_forward_reduce_cuda_kernel_2d", 2, "t >= 0 && t < n_classes");
    fputs("Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], ", stderr);
    fwrite("thread: [3,0,0] ", 1, 16, stderr);
    fputs("Assertion `t >= 0 && t < n_classes` failed.", stderr);
    putc('\n', stderr);
    g_faulted = 1;
    return CUDA_SUCCESS;
  }
  fprintf(stderr, "driver: fprintf %d %s|", 42, "x");
  fputs("fputs|", stderr);
  fwrite("fwrite|", 1, 7, stderr);
  fputc('c', stderr);
  putc('p', stderr);
  fputc('\n', stderr);
  return CUDA_SUCCESS;
}

/* Returns the sticky 710 once cuStreamQuery(1) has printed the text. */
CUresult cuCtxSynchronize(void) { return g_faulted ? CUDA_ERROR_ASSERT : CUDA_SUCCESS; }
