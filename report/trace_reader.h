// Reads a cdsa trace file (docs/trace-format.md) back into TraceData, for the
// cdsa CLI (`cdsa report`, `export`, `merge`, `flame`, `top`) and the fuzzer.
//
// Contract:
//  - Never throws, never crashes, never hangs on any input: a missing,
//    unreadable, non-regular (FIFO, device, directory), oversized, truncated,
//    non-JSON, too deeply nested, wrong-format, wrong-version or wrongly typed
//    file yields an error (base/status.h): one line saying what is wrong and where
//    (e.g. `report.candidates[0].launch.grid: expected an array of 3 unsigned
//    32-bit integers`). The caller adds the file name.
//  - Limits: files up to kMaxTraceBytes, JSON nesting up to kMaxTraceDepth.
//    Memory use is bounded by the file size: about 17x it at worst (a parsed JSON
//    value costs 16 bytes plus vector slack; "[0,0,0,...]" is the worst: 8 MB
//    read in 136 MB of resident memory).
//  - Reentrant (no global state); allocates. Not for libcdsa.so: this links
//    nlohmann-json, which the preload library must not pull in.
//  - Unknown fields are ignored (a newer writer of the same version may add
//    some); missing required fields are errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "report/trace.h"

namespace cdsa::report {

constexpr uint64_t kMaxTraceBytes = 1ull << 28;  // 256 MiB
constexpr int kMaxTraceDepth = 64;

struct TraceFile {
  TraceData data;  // data.report.trace_path is as stored (the writer leaves it empty)
};

// Parses the text of a trace file.
base::StatusOr<TraceFile> parse_trace(std::string_view text);

// Reads and parses the file at `path` (opened without blocking on FIFOs).
base::StatusOr<TraceFile> read_trace_file(const std::string& path);

}  // namespace cdsa::report
