// cdsa simulated CUDA driver (tests only): cuGetProcAddress over the entry-point
// table generated from the toolkit (gen_entry_points.py), the request log, and
// what the exported names the sim does not implement answer.

#include <fcntl.h>

#include <algorithm>

#include "base/io.h"
#include "sim_internal.h"
#include "sim_proc_table.h"

namespace sim {

namespace {

// SIM_CUDA_PROC_LOG=<file>: one line per cuGetProcAddress request, appended:
// "<symbol> <version> <flags> -> <CUresult> <status> <exported name or ->".
void log_request(const char* symbol, int version, cuuint64_t flags, CUresult r, int status, const ProcEntry* e) {
  static const char* path = getenv("SIM_CUDA_PROC_LOG");
  if (path == nullptr || *path == '\0') return;
  char line[512];
  int n = snprintf(line, sizeof line, "%s %d %llu -> %d %d %s\n", symbol, version,
                   static_cast<unsigned long long>(flags), static_cast<int>(r), status, e ? e->symbol : "-");
  if (n <= 0) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  size_t len = static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1;
  cdsa::base::write_all(fd, line, len);  // one O_APPEND write per line: lines from threads never mix
  close(fd);
}

// Rows beyond the generated table: the test-only future entry point (tests/sim/README.md).
const ProcEntry kFutureRows[] = {
    {"cuLaunchKernel", 13990, ProcVariant::Plain, "(cuLaunchKernel at 13990: not exported)",
     reinterpret_cast<void*>(&future_launch_kernel)},
};

// The newest entry for `symbol` at or below `version`; the per-thread variant
// when asked for and at least as new as the plain one. Rows newer than the driver's version do not exist.
const ProcEntry* lookup(const char* symbol, int version, bool per_thread, CUdriverProcAddressQueryResult& status) {
  const ProcEntry *plain = nullptr, *pt = nullptr;
  const int driver = driver_version();
  auto consider = [&](const ProcEntry* e) {
    if (e->version > version || e->version > driver) return;
    const ProcEntry*& best = e->variant == ProcVariant::Plain ? plain : pt;
    if (best == nullptr || e->version > best->version) best = e;
  };
  // The table is sorted by name (strcmp order): the rows of `symbol` are one run.
  const ProcEntry* end = kProcTable + kProcTableSize;
  const ProcEntry* first = std::lower_bound(
      kProcTable, end, symbol, [](const ProcEntry& e, const char* name) { return strcmp(e.name, name) < 0; });
  bool known = first != end && strcmp(first->name, symbol) == 0;
  for (const ProcEntry* e = first; e != end && strcmp(e->name, symbol) == 0; ++e) consider(e);
  for (const ProcEntry& e : kFutureRows)
    if (strcmp(e.name, symbol) == 0) consider(&e);
  const ProcEntry* e =
      (per_thread && pt != nullptr && (plain == nullptr || pt->version >= plain->version)) ? pt : plain;
  status = e != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS
           : known      ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                        : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return e;
}

// What a request with no function to give answers. cuda.h: "The API will return CUDA_SUCCESS and set the returned
// pfn to NULL if the requested driver function is not supported on the platform, no ABI compatible driver function
// exists for the specified cudaVersion or if the driver symbol is invalid" (SIM_CUDA_PROC_MISSING=null, the
// default); =error: CUDA_ERROR_NOT_FOUND, what the sim answered before (*assumed*: which one a real driver gives is
// for the GPU suite to print; cdsa must handle both). Read at every call.
CUresult missing_answer() {
  const char* v = getenv("SIM_CUDA_PROC_MISSING");
  if (v == nullptr || *v == '\0' || strcmp(v, "null") == 0) return CUDA_SUCCESS;
  if (strcmp(v, "error") == 0) return CUDA_ERROR_NOT_FOUND;
  static bool said = false;  // once per process (a race only repeats the line)
  if (!said) {
    said = true;
    fprintf(stderr, "simulated CUDA driver: SIM_CUDA_PROC_MISSING=%s is not null or error; using the default\n", v);
  }
  return CUDA_SUCCESS;
}

CUresult get_proc_address(const char* symbol, void** pfn, int version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status_out) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (version > driver_version()) {
    // cuda.h: "If the specified CUDA version is greater than the driver version, the API will return
    // CUDA_ERROR_INVALID_VALUE."
    *pfn = nullptr;
    log_request(symbol, version, flags, CUDA_ERROR_INVALID_VALUE, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, nullptr);
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdriverProcAddressQueryResult status;
  const ProcEntry* e = lookup(symbol, version, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, status);
  *pfn = e != nullptr ? e->fn : nullptr;
  if (status_out != nullptr) *status_out = status;
  CUresult r = e != nullptr ? CUDA_SUCCESS : missing_answer();
  log_request(symbol, version, flags, r, status, e);
  return r;
}

}  // namespace

int driver_version() {  // read at every call: a test may set it
  const char* e = getenv("SIM_CUDA_DRIVER_VERSION");
  int n = e && *e ? atoi(e) : 0;
  return n > 0 ? n : kDefaultDriverVersion;
}

// Before cuInit: CUDA_ERROR_NOT_INITIALIZED; after a fault: the sticky error
// (like every call that can surface one; not cuGetExportTable); else 801.
int unimplemented_call(const char* name) {
  if (!S().initialized.load(std::memory_order_acquire)) return CUDA_ERROR_NOT_INITIALIZED;
  if (strcmp(name, "cuGetExportTable") != 0) {
    CUresult e = observe(t_current);
    if (e != CUDA_SUCCESS) return e;
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace sim

using namespace sim;

SIM_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_API CUresult cuGetProcAddress_v2_ptsz(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* symbolStatus) {
  if ((flags & (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) == 0)
    flags |= CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return get_proc_address(symbol, pfn, cudaVersion, flags, nullptr);
}
