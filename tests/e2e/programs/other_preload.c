/* Another preload library, of the kind that breaks when a dlsym hook changes
 * its caller: it resolves the next malloc with dlsym(RTLD_NEXT, "malloc") from
 * inside its own malloc wrapper. Prints how many calls it forwarded at exit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void* (*next_malloc)(size_t);
static unsigned long forwarded;
static int resolving;
static char bootstrap[65536];
static size_t bootstrap_used;

void* malloc(size_t n) {
  if (!next_malloc) {
    if (resolving) { /* dlsym itself may allocate */
      void* p = bootstrap + bootstrap_used;
      bootstrap_used += (n + 15) & ~(size_t)15;
      return bootstrap_used <= sizeof bootstrap ? p : NULL;
    }
    resolving = 1;
    next_malloc = (void* (*)(size_t))dlsym(RTLD_NEXT, "malloc");
    resolving = 0;
    if (!next_malloc || next_malloc == malloc) {
      static const char msg[] = "other-preload: dlsym(RTLD_NEXT, malloc) did not find the next malloc\n";
      write(2, msg, sizeof msg - 1);
      abort();
    }
  }
  __atomic_add_fetch(&forwarded, 1, __ATOMIC_RELAXED);
  return next_malloc(n);
}

__attribute__((destructor)) static void report(void) {
  char buf[96];
  int len = snprintf(buf, sizeof buf, "other-preload: forwarded %s\n", forwarded > 0 ? "mallocs" : "nothing");
  write(2, buf, (size_t)len);
}
