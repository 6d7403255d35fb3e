/* Another preload library that interposes stdio (as loggers and output capturers do): fputs, fwrite, fputc and
 * putc, each forwarded to dlsym(RTLD_NEXT, name). It counts the calls on stderr and prints the counts at exit:
 * "stdio-hook: fputs N fwrite N fputc N putc N". Beside libcdsa.so, in either order, it must count what it
 * counts alone (test_other_interposers.py). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

static unsigned long n_fputs, n_fwrite, n_fputc, n_putc;

typedef int (*fputs_fn)(const char*, FILE*);
typedef size_t (*fwrite_fn)(const void*, size_t, size_t, FILE*);
typedef int (*putc_fn)(int, FILE*);

#define NEXT(name, type)   \
  static type next_##name; \
  if (!next_##name) next_##name = (type)dlsym(RTLD_NEXT, #name)

__attribute__((visibility("default"))) int fputs(const char* s, FILE* f) {
  NEXT(fputs, fputs_fn);
  if (f == stderr) __atomic_add_fetch(&n_fputs, 1, __ATOMIC_RELAXED);
  return next_fputs(s, f);
}

__attribute__((visibility("default"))) size_t fwrite(const void* p, size_t size, size_t n, FILE* f) {
  NEXT(fwrite, fwrite_fn);
  if (f == stderr) __atomic_add_fetch(&n_fwrite, 1, __ATOMIC_RELAXED);
  return next_fwrite(p, size, n, f);
}

__attribute__((visibility("default"))) int fputc(int c, FILE* f) {
  NEXT(fputc, putc_fn);
  if (f == stderr) __atomic_add_fetch(&n_fputc, 1, __ATOMIC_RELAXED);
  return next_fputc(c, f);
}

__attribute__((visibility("default"))) int putc(int c, FILE* f) {
  NEXT(putc, putc_fn);
  if (f == stderr) __atomic_add_fetch(&n_putc, 1, __ATOMIC_RELAXED);
  return next_putc(c, f);
}

__attribute__((destructor)) static void report(void) {
  char buf[128];
  int len = snprintf(buf, sizeof buf, "stdio-hook: fputs %lu fwrite %lu fputc %lu putc %lu\n", n_fputs, n_fwrite,
                     n_fputc, n_putc);
  (void)!write(2, buf, (size_t)len);
}
