// The post-mortem trace file: everything the report needs, without the process.
//
// Format: JSON, "format": "cdsa-trace", "version": 2 (docs/trace-format.md); its fields are listed once, in
// report/trace_fields.def, from which the writer, the reader and docs/trace-schema.json are made. Every stack is
// stored once, under "stacks"; launches, profile sites and the report name stacks by id.
// Contract: `trace_to_json` is pure; `write_trace_file` creates the file with
// mode 0600 through O_CREAT|O_EXCL|O_NOFOLLOW on a temporary name and links it
// into place, so it never writes through an existing file or symbolic link and
// never overwrites another process's file (a taken name gets a -1, -2... suffix).
// Not async-signal-safe; allocates.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "report/fault_report.h"

namespace cdsa::report {

constexpr int kTraceVersion = 2;
// The oldest version the reader takes: version 1 stored the report's stacks in place (and again under "stacks").
constexpr int kOldestTraceVersion = 1;

// A module loaded in the process, as the trace records it for offline symbolization.
struct ModuleRecord {
  std::string path;
  std::string build_id;
  uint64_t bias = 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [start, end) of each PT_LOAD
};

// A stream's launch count and last landed completion mark.
struct Stream {
  uint64_t id = 0;
  uint64_t launched = 0;  // launches made on it
  uint64_t landed = 0;    // last completion mark that landed
  bool breadcrumbs = false;
};

// Facts about the process that wrote the trace.
struct Process {
  int pid = 0;
  std::string host;
  std::vector<std::string> argv;
  uint64_t start_time_unix_ns = 0;
  int rank = -1, world_size = -1, local_rank = -1;
  int driver_version = 0;
  std::string gpu;
  int runtime_version = 0;  // cudaRuntimeGetVersion of a shared cudart in the process; 0 when unknown
  std::string session;      // CDSA_SESSION: the launcher tree the process ran in ("" when none)
};

// Launch-site profile (CDSA_PROFILE=1): launches per (stack, kernel) for the whole run.
struct ProfileSite {
  uint32_t stack_id = 0xffffffffu;  // 0xffffffff: the stack was not recorded (table full)
  std::string kernel;
  uint64_t count = 0;
};

struct Profile {
  uint32_t capacity = 0;  // (stack, kernel) pairs the table holds
  uint64_t dropped = 0;   // launches not counted because the table was full
  std::vector<ProfileSite> sites;
};

// An interned stack and its id.
struct StackEntry {
  uint32_t id = 0;
  CallStack stack;
};

// The writer of the file: cdsa's version and its effective configuration (key, value as text).
struct WriterInfo {
  std::string version;
  std::vector<std::pair<std::string, std::string>> config;
  int cuda_headers = 0;  // CUDA_VERSION of the headers libcdsa.so wraps (13050); 0 when the file does not say
};

struct TraceData {
  WriterInfo cdsa;
  Process process;
  std::vector<ModuleRecord> modules;
  // Interned stacks by id. The writer adds every stack the report names (each once); the reader fills the
  // report's stacks from here.
  std::vector<StackEntry> stacks;
  std::vector<Launch> launches;                        // oldest first
  std::vector<Stream> streams;
  bool has_fault = false;
  FaultReport report;
  std::string reason;  // "fault" or "exit"
  bool has_profile = false;  // written as "profile" only when set
  Profile profile;
};

std::string trace_to_json(const TraceData& t);
// The report as one self-contained object (one line, no trailing newline): the trace file's "report" object with
// each stack also in place ("stack" beside each launch, "surfaced_stack"), for `cdsa report --json` and the Python
// API, which have no "stacks" to look ids up in.
std::string report_to_json(const FaultReport& r);
// Sets each stack of t->report (the surfaced stack, the candidates', their graph nodes' and forward candidates')
// to the entry of t->stacks its id names; a stack whose id is null or not there is left as it is.
void fill_report_stacks(TraceData* t);
std::string json_escape(const std::string& s);

// Writes `contents` to `path` (or path-N when taken). On success sets *written.
bool write_trace_file(const std::string& path, const std::string& contents, std::string* written,
                      std::string* error);

}  // namespace cdsa::report
