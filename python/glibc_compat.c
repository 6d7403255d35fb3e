// Wheel build only (python/CMakeLists.txt links this into libcdsa.so and the CLI): keeps the wheel installable
// on glibc 2.34 (RHEL 9, Ubuntu 22.04) although it is built on Debian 12 (glibc 2.36).
//
// The only newer glibc symbols the two binaries reference come from the static libstdc++/libgcc of GCC 12:
//   arc4random (GLIBC_2.36)      std::random_device
//   _dl_find_object (GLIBC_2.35) the exception unwinder's lookup of an address's .eh_frame_hdr
// Defining both here, hidden, binds those references to these copies at link time, so the binaries need nothing
// newer than GLIBC_2.34 (dlopen & co. in libc), the same floor as the Debian libraries the wheel carries.
// `auditwheel show` checks the result; tools/build_wheel.sh tags the wheel with what it reports.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define CDSA_HIDDEN __attribute__((visibility("hidden")))

CDSA_HIDDEN uint32_t arc4random(void) {
  uint32_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v) return v;
  struct timespec ts;  // entropy pool not ready yet (early boot): std::random_device still gets a value
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint32_t)ts.tv_nsec ^ (uint32_t)((uintptr_t)&v >> 4) ^ (uint32_t)ts.tv_sec * 2654435761u;
}

struct find_object {
  uintptr_t pc;
  struct dl_find_object* out;
  int found;
};

static int find_object_cb(struct dl_phdr_info* info, size_t size, void* data) {
  (void)size;
  struct find_object* f = data;
  uintptr_t lo = UINTPTR_MAX, hi = 0, eh = 0;
  int hit = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_GNU_EH_FRAME) eh = start;
    if (ph->p_type != PT_LOAD) continue;
    if (start < lo) lo = start;
    if (start + ph->p_memsz > hi) hi = start + ph->p_memsz;
    if (f->pc >= start && f->pc < start + ph->p_memsz) hit = 1;
  }
  if (!hit) return 0;
  f->out->dlfo_map_start = (void*)lo;
  f->out->dlfo_map_end = (void*)hi;
  f->out->dlfo_eh_frame = (void*)eh;
  f->found = 1;
  return 1;
}

// glibc's contract: 0 and *result filled when pc lies in a loaded object, -1 otherwise.
CDSA_HIDDEN int _dl_find_object(void* pc, struct dl_find_object* result) {
  memset(result, 0, sizeof *result);
  struct find_object f = {(uintptr_t)pc, result, 0};
  dl_iterate_phdr(find_object_cb, &f);
  if (!f.found) return -1;
  Dl_info info;
  void* map = NULL;
  if (dladdr1(pc, &info, &map, RTLD_DL_LINKMAP) != 0) result->dlfo_link_map = map;
  return 0;
}
