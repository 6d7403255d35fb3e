// The driver entry points cdsa wraps: one per PFN_<name>_v<version>[_ptsz|_ptds]
// typedef of the toolkit's cudaTypedefs.h (generated at build time by
// tools/cuda_api.py; shim/intercept/driver_calls.def holds the hand-written kinds and the
// exempt names), and how a request selects one.
//
// Contract: the table is constant data; every function here is pure,
// allocation-free, lock-free and safe from any thread, at any time (also before
// main and from the dlsym hook).
//
// Example: select_entry_point("cuCtxSynchronize", 13000, false) is the index of
// PFN_cuCtxSynchronize_v13000, exported as cuCtxSynchronize_v2.
#pragma once

namespace cdsa {

struct EntryPoint {
  const char* pfn;     // the typedef: "PFN_cuLaunchKernel_v7000_ptsz"
  const char* base;    // the name cuGetProcAddress is asked for: "cuLaunchKernel"
  int version;         // the CUDA version in which this signature appeared (7000 = 7.0)
  bool per_thread;     // a _ptsz/_ptds variant (per-thread default stream)
  const char* symbol;  // the exported symbol with this signature ("" when none)
};

int entry_point_count() noexcept;
const EntryPoint& entry_point(int index) noexcept;

// What cuGetProcAddress(name, version, flags) returns: the newest signature of
// `name` not newer than `version`, its per-thread variant when `per_thread` and
// one exists. -1 for unknown names, exempt names and versions older than any.
int select_entry_point(const char* name, int version, bool per_thread) noexcept;
// The entry point exported as `symbol` (what dlsym and -lcuda reach), or -1.
int find_entry_symbol(const char* symbol) noexcept;
// A call that cannot surface a fault, never wrapped (driver_calls.def CDSA_EXEMPT).
bool is_exempt_entry(const char* name) noexcept;
// The CUDA version of the headers the table was generated from (cuda.h's CUDA_VERSION: 13000 for 13.0). A request
// above it may name a prototype the table does not have (interpose.cc: wrap_proc_address).
int header_version() noexcept;
// A driver API name ("cu" and a capital: cuLaunchHostFunc_v2, not cudaMalloc or cublasCreate) that the table
// neither wraps nor exempts: a newer driver's export, which dlsym hands back through a pass-through thunk.
bool is_unknown_driver_symbol(const char* symbol) noexcept;

}  // namespace cdsa
