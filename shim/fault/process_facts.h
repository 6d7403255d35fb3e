// Facts about this process that the report and the trace file name (host, command line, rank, world size, the
// driver's and runtime's versions), and the trace file's path policy (CDSA_TRACE_FILE's %h %p %r %R %t).
//
// Contract: report path only (allocates, reads /proc/self/cmdline, asks the driver for its version), under the
// reentrancy guard. The rank, world size and local rank are read from the environment each time they are asked
// for, not at start: launchers and programs set them at run time (os.environ writes call setenv, so a rank the
// program sets before CUDA starts is seen). A variable that is not a decimal integer in range (0..2^30-1; the
// world size 1 and up) counts as unset, and the next one in the list is tried.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/trace.h"

namespace cdsa {

// gethostname(), "" when it fails.
std::string host_name();
// /proc/self/cmdline, one string per argument.
std::vector<std::string> process_argv();
// RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, then LOCAL_RANK: the first that is set; -1: none.
int process_rank();
// WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE: the first that is set; -1: unknown.
int process_world_size();
// LOCAL_RANK, then SLURM_LOCALID; -1: unknown.
int process_local_rank();
// Everything the trace's "process" object holds (the GPU: the first context's device cdsa noted at a launch).
report::Process process_facts(uint64_t start_unix_ns);

// The trace path policy: `pattern` with %h (host), %p (pid), %r (rank, or "norank" when there is none), %R
// ("-rank<N>", or nothing when there is no rank), %t (start time, Unix seconds) and %% (a percent sign) expanded;
// any other %x, and a % at the end, are kept as written.
std::string expand_trace_pattern(const std::string& pattern, const std::string& host, int pid, int rank,
                                 uint64_t start_unix_s);
// Where this process's trace file goes: CDSA_TRACE_FILE expanded with this host, pid and the rank read now.
std::string trace_path_for_process(uint64_t start_unix_ns);

}  // namespace cdsa
