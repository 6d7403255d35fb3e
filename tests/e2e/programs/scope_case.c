/* (8): dlopen a library RTLD_LOCAL that resolves its own group with dlsym(RTLD_DEFAULT, ...). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  void* h = dlopen(argc > 1 ? argv[1] : "libe2e_scope_user.so", RTLD_LOCAL | RTLD_NOW);
  if (!h) {
    fprintf(stderr, "scope_case: %s\n", dlerror());
    return 1;
  }
  void (*probe)(void) = (void (*)(void))dlsym(h, "scope_probe");
  if (!probe) return 1;
  probe();
  return 0;
}
