// cdsa's configuration, read once from CDSA_* environment variables.
//
// Contract: `load_config()` runs in the library constructor (single-threaded at
// that point); afterwards `config()` is read-only and safe from any thread.
// Bad values print one message each ("cdsa: CDSA_NATIVE_DEPTH=abc: expected an
// integer in 0..256; using 48") and fall back to the default. Under secure
// execution (setuid/setgid, AT_SECURE) the environment is ignored and no trace
// file is written.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cdsa {

enum class TraceMode { Off, OnFault, Always };
enum class Backend { Driver, Cupti };

struct Config {
  bool enabled = true;                 // CDSA_DISABLE=1 turns every hook into a pass-through
  int native_depth = 48;               // CDSA_NATIVE_DEPTH, 0..256
  int python_depth = 24;               // CDSA_PYTHON_DEPTH, 0..256
  uint32_t ring_size = 65536;          // CDSA_RING_SIZE, launch records kept (rounded up to a power of two)
  uint32_t stack_table_size = 16384;   // CDSA_STACK_TABLE, distinct launch stacks kept
  bool breadcrumbs = true;             // CDSA_BREADCRUMBS=0 disables the stream-ordered completion marks
  TraceMode trace = TraceMode::OnFault;  // CDSA_TRACE=fault|always|off
  char trace_pattern[512] = "cdsa-%h-%p.json";  // CDSA_TRACE_FILE (%h host, %p pid, %r rank, %t time)
  Backend backend = Backend::Driver;   // CDSA_BACKEND=driver|cupti
  int exit_probe_ms = 2000;            // CDSA_EXIT_PROBE_MS: how long the exit probe waits for pending work
  bool quiet = false;                  // CDSA_QUIET=1: no report on stderr (trace file only)
  bool profile = false;                // CDSA_PROFILE=1: count launches per (stack, kernel), written at exit
  bool secure = false;                 // AT_SECURE was set: environment ignored
};

const Config& config() noexcept;
void load_config() noexcept;

// Every CDSA_* variable with a one-line description, for `cdsa run --help`.
struct ConfigVarDoc {
  const char* name;
  const char* help;
};
extern const ConfigVarDoc kConfigVars[];
extern const size_t kConfigVarCount;

}  // namespace cdsa
