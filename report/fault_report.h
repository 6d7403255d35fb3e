// The fault report as data: what the live process prints, what the trace file
// stores under "report", and what `cdsa report FILE` prints again.
//
// Contract: plain values, no pointers into the process; `format_report_text`
// is a pure function of the struct, so the live report and the one printed
// from a trace file are the same text. Not thread-safe per object; allocates.
//
// Everything here is in namespace cdsa::report, so a reader sees `report::Launch`
// where the shim or the CLI holds a launch as the report keeps it. The names differ
// from those of the recorder's raw data (shim/record/recorder.h: LaunchRecord, Stack) and of
// the symbolizer's answers (symbolizer::NativeFrame, symbolizer::Module), which
// report/frames.h and shim/fault/report_builder.h turn into these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/device_assert.h"

namespace cdsa::report {

// One Python frame: where the interpreter was, with its source line.
struct PyFrame {
  std::string file;
  std::string function;
  int line = 0;
  std::string source;  // the source line, stripped; empty when unreadable
};

// One native frame resolved for the report: the PC, its module and offset, and what the
// symbolizer named there (report/frames.h has the rule for inlined code).
struct ResolvedFrame {
  uint64_t pc = 0;
  std::string module;          // path of the object
  uint64_t module_offset = 0;  // pc relative to the object's load bias
  std::string function;        // demangled; empty when unknown
  std::string file;            // from DWARF, when known
  int line = 0;
};

// The stack a launch (or the failing call) was made from: Python and native frames.
struct CallStack {
  std::vector<PyFrame> python;        // innermost first
  std::vector<ResolvedFrame> native;  // innermost first
};

// One launch as the report and the trace keep it (made from shim/record/recorder.h's LaunchRecord).
struct Launch {
  uint64_t seq = 0, stream_seq = 0, stream_id = 0, graph_id = 0, time_ns = 0;
  uint32_t ctx_id = 0, tid = 0, stack_id = 0xffffffffu;
  std::string kernel;
  std::string kind;  // kernel, kernel_ex, cooperative, graph; empty: the record is lost (only the stream ids are known)
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared_mem = 0;
  bool captured = false;
  bool per_thread_stream = false;
};

// A launch and the stack it was made from: a kernel node of a graph (its capture-time stack), or a
// forward launch named as a candidate.
struct LaunchWithStack {
  Launch launch;
  CallStack stack;
  // Graph kernel nodes: what made or last changed the node ("captured", "added by cuGraphAddKernelNode_v2",
  // "changed by cuGraphExecKernelNodeSetParams_v2"; empty in older files), and whether a change cdsa could not
  // pair for sure leaves it one of several that may have run.
  std::string node_origin;
  bool node_uncertain = false;
  // The exec took the node from another graph by this call (cuGraphExecUpdate[_v2]; empty if not), made there
  // (update_stack_id: its id in the trace's stacks, as Launch::stack_id).
  std::string update_call;
  uint32_t update_stack_id = 0xffffffffu;
  CallStack update_stack;
};

// A launch the report names as the failing one, or as one of the possible ones.
struct Candidate {
  Launch launch;
  CallStack stack;
  uint64_t pending = 0;       // launches on its stream whose completion mark never landed
  std::string why;            // one line: why this launch is named
  std::vector<LaunchWithStack> graph_nodes;  // for a graph launch: the kernel nodes that replay ran
  int graph_node_pick = -1;                  // the one the device's assert names (index into graph_nodes), or -1
  bool graph_nodes_ambiguous = false;        // which node failed is not known
  // A launch by PyTorch's autograd engine (no Python frames): the node its native frames run,
  // e.g. "EmbeddingBackward0", and the most recent forward launches of the same operator,
  // newest first. These are candidates for the line that made the op, never certain.
  std::string autograd_node;
  std::vector<LaunchWithStack> forward_candidates;
};

enum class Attribution { Exact, Ambiguous, Unknown };

// Who made the report, for the header line: in a multi-process job the rank (RANK, SLURM_PROCID,
// OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, then LOCAL_RANK, read when the report is made), and the GPU of the
// failing launch's context as the driver named it while the context was alive (to match the kernel's Xid lines).
struct Origin {
  int rank = -1;        // -1: no rank variable set
  int world_size = -1;  // WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE; -1: unknown
  int pid = 0;
  std::string host;
  int gpu_ordinal = -1;  // the CUdevice; -1: no device was noted
  std::string gpu_name;
  std::string gpu_pci_bus_id;  // e.g. "0000:3B:00.0"
};

struct FaultReport {
  Origin origin;
  int code = 0;
  std::string error_name;    // CUDA_ERROR_ASSERT
  std::string error_string;  // device-side assert triggered
  std::string surfaced_call; // the driver entry point that returned it, or "exit probe"
  uint32_t surfaced_tid = 0;
  uint32_t surfaced_stack_id = 0xffffffffu;  // the interned stack surfaced_stack is (0xffffffff: none)
  CallStack surfaced_stack;
  Attribution attribution = Attribution::Unknown;
  // Ambiguous: whether the failing launch is known to be among the candidates. False when a launch cdsa did not
  // record may be it: a stream without marks, a launch in flight on another thread, work submitted through an entry
  // point cdsa could only pass through (the notes say which).
  bool candidates_complete = true;
  std::vector<Candidate> candidates;  // exact: one; ambiguous: several, listed in order (not a likelihood)
  // The device's assert lines, parsed once (base/device_assert.h); .message is each line as the driver printed it,
  // and all the trace file stores (its reader parses them again).
  std::vector<base::DeviceAssert> device_asserts;
  std::vector<std::string> hints;     // what the fault likely means and the next step (report/hints.h)
  std::vector<std::string> notes;     // limits that affect this report (ring overwrote, tables full...)
  std::string trace_path;             // empty when none was written
  uint64_t launches_recorded = 0;
  uint64_t fault_time_unix_ns = 0;    // wall clock when the fault surfaced (0: unknown); not printed
};

const char* attribution_name(Attribution a);

// Every stack of report `r`, each with the id it is interned as (0xffffffff: none), in the order the report shows
// them: the surfaced stack, then for each candidate its own, its graph nodes' (each node's, then the stack of the
// call that took it into the exec) and its forward candidates'. The one list of a report's stacks: the trace's
// writer and reader and `cdsa report` walk it. R: FaultReport or const FaultReport; fn(uint32_t id, CallStack&).
template <class R, class F>
void for_each_report_stack(R& r, F&& fn) {
  fn(r.surfaced_stack_id, r.surfaced_stack);
  for (auto& c : r.candidates) {
    fn(c.launch.stack_id, c.stack);
    for (auto& g : c.graph_nodes) {
      fn(g.launch.stack_id, g.stack);
      fn(g.update_stack_id, g.update_stack);
    }
    for (auto& g : c.forward_candidates) fn(g.launch.stack_id, g.stack);
  }
}

struct TextOptions {
  bool native_all = false;  // every native frame: no folding of interpreter frames (report/hybrid_stack.h)
  // false: everything but the closing rule, for a copy that a signal handler ends with a line of its own and the
  // rule (shim/fault/fault_signals.h)
  bool closing_rule = true;
};
// The report as printed on stderr (ends with a newline). With a rank, every line that starts "cdsa: " starts
// "cdsa[rank N]: " instead, so the ranks' reports can be told apart in an interleaved log.
std::string format_report_text(const FaultReport& r, const TextOptions& options = {});
// What is known first, the report's head: the banner, who reports (when known), the error and where it surfaced,
// "cdsa: surfaced at CALL (thread N)" (without the stack), each line as format_report_text writes it.
std::string format_report_head(const FaultReport& r);
// The line that ends a report.
inline constexpr const char kReportClosingRule[] =
    "=======================================================================\n";
// "rank 3 of 8, pid 1234 on node7, GPU 0 NVIDIA H200 (PCI 0000:3B:00.0)": what the header line says.
std::string describe_origin(const Origin& o);
// One-line description of a launch: kernel, grid, block, stream, launch number.
std::string describe_launch(const Launch& l);

}  // namespace cdsa::report
