// cdsa simulated CUDA driver (tests only): the entry-point table that
// gen_entry_points.py generates from the toolkit (see that script). Kept free
// of cuda.h so that the generated file can declare every exported name itself.
#ifndef CDSA_TESTS_SIM_SIM_PROC_TABLE_H
#define CDSA_TESTS_SIM_SIM_PROC_TABLE_H

#include <stddef.h>

namespace sim {

// Which default stream an entry point uses: the plain one takes NULL as the
// legacy stream, _ptsz/_ptds ones as the calling thread's per-thread stream.
enum class ProcVariant : unsigned char { Plain, Ptsz, Ptds };

struct ProcEntry {
  const char* name;     // as cuGetProcAddress is asked for it ("cuCtxSynchronize")
  int version;          // the CUDA version that introduced this signature (13000)
  ProcVariant variant;  // per-thread-default-stream variant or not
  const char* symbol;   // the exported function ("cuCtxSynchronize_v2")
  void* fn;             // its address in the sim
};

// Sorted by name, then version.
extern const ProcEntry kProcTable[];
extern const size_t kProcTableSize;

// Every cu* function the toolkit's stub libcuda.so exports (the sim exports them all).
extern const char* const kStubExports[];
extern const size_t kStubExportsSize;

// What an exported name the sim does not implement answers (sim_proc.cc).
int unimplemented_call(const char* name);

}  // namespace sim

#endif  // CDSA_TESTS_SIM_SIM_PROC_TABLE_H
