/* dlsym of driver entry points newer than some drivers (tests/e2e/test_entry_versions.py): dlopen(argv[1]), a
 * libcuda.so.1, then for each name what dlsym finds on the handle and with RTLD_DEFAULT. Links no libcuda itself,
 * so the one it opens is the only one. Under cdsa, a name the loaded driver lacks must be NULL, as without cdsa,
 * even though libcdsa.so exports a wrapper of that name (it was built from newer headers). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s LIBCUDA NAME...\n", argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  for (int i = 2; i < argc; ++i)
    printf("%s: handle %s, default %s\n", argv[i], dlsym(h, argv[i]) ? "found" : "NULL",
           dlsym(RTLD_DEFAULT, argv[i]) ? "found" : "NULL");
  return 0;
}
