/* Case 23b/23c (issue 7): a preloaded logger, for a machine without strace. Writes one line per event to the file
 * named by FACT_LOG (raw syscalls, so it never prints through what it watches):
 *   print fn=F fd=N tid=T text=...   a stdio function (or write) called with text holding "ssert" (the device's
 *                                    assert lines): which function, which fd, which thread
 *   chars fn=F fd=2 n=N tid=T        at exit: how many characters fputc/putc/_IO_putc wrote to stderr, and the
 *                                    last thread that did
 *   launch via=NAME handle=H cuFuncGetName=RC:NAME cuKernelGetName=RC:NAME
 *                                    the first 4 distinct handles passed to cuLaunchKernel[Ex][_ptsz] obtained
 *                                    through cuGetProcAddress_v2 or dlsym (how cudart gets them), and what the two
 *                                    naming calls answer for each
 * Built by the suite: nvcc -shared -Xcompiler -fPIC -x c fact_logger.c -o fact_logger.so -ldl */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void* (*dlsym_fn)(void*, const char*);
static dlsym_fn real_dlsym_p;

static dlsym_fn real_dlsym(void) {
  if (!real_dlsym_p) {
    real_dlsym_p = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym_p) real_dlsym_p = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  }
  return real_dlsym_p;
}
static void* next(const char* name) { return real_dlsym()(RTLD_NEXT, name); }

static void log_raw(const char* line, size_t n) {
  const char* path = getenv("FACT_LOG");
  if (!path) return;
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  syscall(SYS_write, fd, line, n);
  syscall(SYS_close, fd);
}

static void note_text(const char* fn, int fd, const char* text, size_t n) {
  if (!text || n == 0) return;
  if (!memmem(text, n, "ssert", 5)) return;
  char line[600];
  int k = snprintf(line, sizeof line, "print fn=%s fd=%d tid=%ld text=", fn, fd, (long)syscall(SYS_gettid));
  size_t room = sizeof line - (size_t)k - 2;
  size_t m = n < room ? n : room;
  for (size_t i = 0; i < m; ++i) line[k + i] = (text[i] == '\n' || text[i] == '\r') ? ' ' : text[i];
  line[k + m] = '\n';
  log_raw(line, (size_t)k + m + 1);
}

static int stream_fd(FILE* f) { return f ? fileno(f) : -1; }

static void note_fmt(const char* fn, FILE* f, const char* fmt, va_list ap) {
  char buf[512];
  va_list cp;
  va_copy(cp, ap);
  int n = vsnprintf(buf, sizeof buf, fmt, cp);
  va_end(cp);
  if (n > 0) note_text(fn, stream_fd(f), buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* ---- stdio (what libcuda imports) and write. Each printf-family function is logged under its own name, then
 * forwarded to the real vfprintf or __vfprintf_chk with its arguments as a va_list. */
static int forward_vfprintf(const char* fn, FILE* f, const char* fmt, va_list ap) {
  note_fmt(fn, f, fmt, ap);
  return ((int (*)(FILE*, const char*, va_list))next("vfprintf"))(f, fmt, ap);
}
static int forward_vfprintf_chk(const char* fn, FILE* f, int flag, const char* fmt, va_list ap) {
  note_fmt(fn, f, fmt, ap);
  return ((int (*)(FILE*, int, const char*, va_list))next("__vfprintf_chk"))(f, flag, fmt, ap);
}
/* The body of a variadic wrapper: `call` made with the arguments after `last` as the va_list ap. */
#define WITH_VA_LIST(last, call) \
  va_list ap;                    \
  va_start(ap, last);            \
  int r = call;                  \
  va_end(ap);                    \
  return r

int vfprintf(FILE* f, const char* fmt, va_list ap) { return forward_vfprintf("vfprintf", f, fmt, ap); }
int fprintf(FILE* f, const char* fmt, ...) { WITH_VA_LIST(fmt, forward_vfprintf("fprintf", f, fmt, ap)); }
int __vfprintf_chk(FILE* f, int flag, const char* fmt, va_list ap) {
  return forward_vfprintf_chk("__vfprintf_chk", f, flag, fmt, ap);
}
int __fprintf_chk(FILE* f, int flag, const char* fmt, ...) {
  WITH_VA_LIST(fmt, forward_vfprintf_chk("__fprintf_chk", f, flag, fmt, ap));
}
int vprintf(const char* fmt, va_list ap) {
  note_fmt("vprintf", stdout, fmt, ap);
  return ((int (*)(const char*, va_list))next("vprintf"))(fmt, ap);
}
int printf(const char* fmt, ...) { WITH_VA_LIST(fmt, forward_vfprintf("printf", stdout, fmt, ap)); }
int __printf_chk(int flag, const char* fmt, ...) {
  WITH_VA_LIST(fmt, forward_vfprintf_chk("__printf_chk", stdout, flag, fmt, ap));
}
int fputs(const char* s, FILE* f) {
  note_text("fputs", stream_fd(f), s, strlen(s));
  return ((int (*)(const char*, FILE*))next("fputs"))(s, f);
}
int puts(const char* s) {
  note_text("puts", 1, s, strlen(s));
  return ((int (*)(const char*))next("puts"))(s);
}
size_t fwrite(const void* p, size_t size, size_t n, FILE* f) {
  note_text("fwrite", stream_fd(f), (const char*)p, size * n);
  return ((size_t(*)(const void*, size_t, size_t, FILE*))next("fwrite"))(p, size, n, f);
}
/* Character output cannot be matched against the text: count it per function (fd 2 only) and log the counts at
 * exit, with the last thread that used it. */
static atomic_long n_chars[3];
static atomic_long last_tid[3];
static const char* const char_fn[3] = {"fputc", "putc", "_IO_putc"};
static void note_char(int i, FILE* f) {
  if (stream_fd(f) != 2) return;
  atomic_fetch_add(&n_chars[i], 1);
  atomic_store(&last_tid[i], (long)syscall(SYS_gettid));
}
int fputc(int c, FILE* f) {
  note_char(0, f);
  return ((int (*)(int, FILE*))next("fputc"))(c, f);
}
int putc(int c, FILE* f) {
  note_char(1, f);
  return ((int (*)(int, FILE*))next("putc"))(c, f);
}
int _IO_putc(int c, FILE* f) {
  note_char(2, f);
  return ((int (*)(int, FILE*))next("_IO_putc"))(c, f);
}
__attribute__((destructor)) static void char_summary(void) {
  for (int i = 0; i < 3; ++i) {
    long n = atomic_load(&n_chars[i]);
    if (!n) continue;
    char line[128];
    int k = snprintf(line, sizeof line, "chars fn=%s fd=2 n=%ld tid=%ld\n", char_fn[i], n, atomic_load(&last_tid[i]));
    if (k > 0) log_raw(line, (size_t)k);
  }
}

ssize_t write(int fd, const void* p, size_t n) {
  note_text("write", fd, (const char*)p, n);
  return (ssize_t)syscall(SYS_write, fd, p, n);
}

/* ---- the handle cudart passes to cuLaunchKernel, and what the naming calls say about it */
typedef CUresult (*gpa_fn)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig*, CUfunction, void**, void**);
static gpa_fn r_gpa;
static launch_fn r_launch, r_launch_ptsz;
static launch_ex_fn r_ex, r_ex_ptsz;
static void* seen[4];
static atomic_int n_seen;

static void name_handle(const char* via, CUfunction f) {
  for (int i = 0; i < atomic_load(&n_seen) && i < 4; ++i)
    if (seen[i] == (void*)f) return;
  int i = atomic_fetch_add(&n_seen, 1);
  if (i >= 4) return;
  seen[i] = (void*)f;
  CUresult (*func_name)(const char**, CUfunction) = NULL;
  CUresult (*kernel_name)(const char**, CUkernel) = NULL;
  if (r_gpa) {
    r_gpa("cuFuncGetName", (void**)&func_name, 12030, 0, NULL);
    r_gpa("cuKernelGetName", (void**)&kernel_name, 12030, 0, NULL);
  }
  if (!func_name) func_name = (CUresult(*)(const char**, CUfunction))dlsym(RTLD_DEFAULT, "cuFuncGetName");
  if (!kernel_name) kernel_name = (CUresult(*)(const char**, CUkernel))dlsym(RTLD_DEFAULT, "cuKernelGetName");
  const char *fn = NULL, *kn = NULL;
  int frc = func_name ? (int)func_name(&fn, f) : -1;
  int krc = kernel_name ? (int)kernel_name(&kn, (CUkernel)f) : -1;
  char line[700];
  int n = snprintf(line, sizeof line, "launch via=%s handle=%p cuFuncGetName=%d:%s cuKernelGetName=%d:%s\n", via,
                   (void*)f, frc, frc == 0 && fn ? fn : "", krc, krc == 0 && kn ? kn : "");
  if (n > 0) log_raw(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

#define LAUNCH_WRAPPER(name, real, label)                                                                    \
  static CUresult name(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g, \
                       unsigned sm, CUstream s, void** p, void** x) {                                        \
    name_handle(label, f);                                                                                   \
    return real(f, a, b, c, d, e, g, sm, s, p, x);                                                           \
  }
LAUNCH_WRAPPER(w_launch, r_launch, "cuLaunchKernel")
LAUNCH_WRAPPER(w_launch_ptsz, r_launch_ptsz, "cuLaunchKernel_ptsz")
static CUresult w_ex(const CUlaunchConfig* c, CUfunction f, void** p, void** x) {
  name_handle("cuLaunchKernelEx", f);
  return r_ex(c, f, p, x);
}
static CUresult w_ex_ptsz(const CUlaunchConfig* c, CUfunction f, void** p, void** x) {
  name_handle("cuLaunchKernelEx_ptsz", f);
  return r_ex_ptsz(c, f, p, x);
}

static void* wrap(const char* name, int ptsz, void* real) {
  if (!real) return real;
  if (!strcmp(name, "cuLaunchKernel")) {
    if (ptsz) return r_launch_ptsz = (launch_fn)real, (void*)w_launch_ptsz;
    return r_launch = (launch_fn)real, (void*)w_launch;
  }
  if (!strcmp(name, "cuLaunchKernel_ptsz")) return r_launch_ptsz = (launch_fn)real, (void*)w_launch_ptsz;
  if (!strcmp(name, "cuLaunchKernelEx")) {
    if (ptsz) return r_ex_ptsz = (launch_ex_fn)real, (void*)w_ex_ptsz;
    return r_ex = (launch_ex_fn)real, (void*)w_ex;
  }
  if (!strcmp(name, "cuLaunchKernelEx_ptsz")) return r_ex_ptsz = (launch_ex_fn)real, (void*)w_ex_ptsz;
  return real;
}

static CUresult w_gpa(const char* s, void** p, int v, cuuint64_t flags, CUdriverProcAddressQueryResult* st) {
  CUresult r = r_gpa(s, p, v, flags, st);
  if (r == CUDA_SUCCESS && p && *p && s) *p = wrap(s, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, *p);
  return r;
}

void* dlsym(void* h, const char* name) {
  void* r = real_dlsym()(h, name);
  if (h == RTLD_NEXT || !r || name[0] != 'c' || name[1] != 'u') return r;
  if (!strcmp(name, "cuGetProcAddress_v2")) {
    r_gpa = (gpa_fn)r;
    return (void*)w_gpa;
  }
  return h == RTLD_DEFAULT ? r : wrap(name, 0, r);
}
