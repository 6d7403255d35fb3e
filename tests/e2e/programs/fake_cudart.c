/* A runtime library loaded only inside an RTLD_LOCAL group (see scope_user.c). */
int cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return 0;
}
