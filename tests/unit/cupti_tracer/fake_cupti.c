/* A stand-in libcupti for tests, loaded by libcdsa.so through CUDA_HOME=<build>/tests/fake_cuda_home.
 * FAKE_CUPTI_MODE=multiple (default): cuptiSubscribe[_v2] report CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
 *   cuptiSubscribe_v2 names the holder given in FAKE_CUPTI_HOLDER (when set).
 * FAKE_CUPTI_MODE=error: CUPTI_ERROR_NOT_INITIALIZED.
 * FAKE_CUPTI_MODE=ok: the subscription succeeds; fake_cupti_emit() then calls the subscriber's callback, so a
 *   test can play the part of CUPTI for launches it makes itself. The fake also exports cuLaunchKernel: looked
 *   up with dlsym (so libcdsa.so's wrapper is bound to it), it calls the driver's real cuLaunchKernel between
 *   an API-enter and an API-exit callback, as CUPTI does inside the driver; FAKE_CUPTI_MISS=2,5 leaves the
 *   2nd and 5th launch unreported.
 * Every entry prints one "fake-cupti: ..." line on stderr so tests can see it was used. */
#define _GNU_SOURCE 1
#include <cupti.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static CUpti_CallbackFunc g_cb;
static void* g_userdata;
static int g_driver_enabled;

static CUptiResult mode_result(void) {
  const char* m = getenv("FAKE_CUPTI_MODE");
  if (!m || !strcmp(m, "multiple")) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  if (!strcmp(m, "error")) return CUPTI_ERROR_NOT_INITIALIZED;
  return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* sub, CUpti_CallbackFunc cb, void* userdata) {
  fprintf(stderr, "fake-cupti: cuptiSubscribe\n");
  CUptiResult r = mode_result();
  if (r == CUPTI_SUCCESS) {
    g_cb = cb;
    g_userdata = userdata;
    *sub = (CUpti_SubscriberHandle)&g_cb;
  }
  return r;
}

EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* sub, CUpti_CallbackFunc cb, void* userdata,
                                     CUpti_SubscriberParams* params) {
  fprintf(stderr, "fake-cupti: cuptiSubscribe_v2 name=%s\n",
          params && params->subscriberName ? params->subscriberName : "(none)");
  CUptiResult r = mode_result();
  const char* holder = getenv("FAKE_CUPTI_HOLDER");
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && holder && params && params->oldSubscriberName &&
      params->oldSubscriberSize > 0)
    snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", holder);
  if (r == CUPTI_SUCCESS) {
    g_cb = cb;
    g_userdata = userdata;
    *sub = (CUpti_SubscriberHandle)&g_cb;
  }
  return r;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle sub) {
  (void)sub;
  g_cb = NULL;
  return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle sub, CUpti_CallbackDomain domain) {
  (void)sub;
  fprintf(stderr, "fake-cupti: cuptiEnableDomain(%u, domain %d)\n", enable, (int)domain);
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) g_driver_enabled = (int)enable;
  return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char** s) {
  *s = r == CUPTI_ERROR_NOT_INITIALIZED ? "CUPTI_ERROR_NOT_INITIALIZED (fake)" : "fake CUPTI result";
  return CUPTI_SUCCESS;
}

/* Test hook: deliver one driver-API callback (site 0 = enter, 1 = exit) with the given parameter block and
 * return value, as CUPTI would from inside the driver call. Returns 0 when nobody is subscribed. */
EXPORT int fake_cupti_emit(unsigned cbid, int site, const char* function_name, const char* symbol_name,
                           const void* params, int return_value) {
  if (!g_cb || !g_driver_enabled) return 0;
  CUresult rv = (CUresult)return_value;
  CUpti_CallbackData d;
  memset(&d, 0, sizeof d);
  d.callbackSite = site ? CUPTI_API_EXIT : CUPTI_API_ENTER;
  d.functionName = function_name;
  d.functionParams = params;
  d.functionReturnValue = &rv;
  d.symbolName = symbol_name;
  g_cb(g_userdata, CUPTI_CB_DOMAIN_DRIVER_API, cbid, &d);
  return 1;
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);
static int g_launches;

static int missed(int n) {
  const char* m = getenv("FAKE_CUPTI_MISS");
  char buf[16];
  snprintf(buf, sizeof buf, "%d", n);
  for (const char* p = m; p && *p;) {
    size_t len = strcspn(p, ",");
    if (len == strlen(buf) && !strncmp(p, buf, len)) return 1;
    p += len + (p[len] == ',');
  }
  return 0;
}

/* The driver's own cuLaunchKernel, found with libc's dlsym (libcdsa.so hooks dlsym: through it this lookup would
 * return cdsa's wrapper, and the launch would be wrapped twice). */
static launch_fn real_launch(void) {
  static launch_fn fn;
  if (!fn) {
    void* (*libc_dlsym)(void*, const char*) = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!libc_dlsym) libc_dlsym = (void* (*)(void*, const char*))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h && libc_dlsym) fn = (launch_fn)libc_dlsym(h, "cuLaunchKernel");
  }
  return fn;
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shmem, CUstream s, void** params, void** extra) {
  launch_fn fn = real_launch();
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  int report = !missed(++g_launches);
  cuLaunchKernel_params p = {f, gx, gy, gz, bx, by, bz, shmem, s, params, extra};
  if (report) fake_cupti_emit(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 0, "cuLaunchKernel", "nll_from_cupti", &p, 0);
  CUresult r = fn(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  if (report)
    fake_cupti_emit(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 1, "cuLaunchKernel", "nll_from_cupti", &p, (int)r);
  return r;
}
