// What the trace-reading commands (report, export, merge, flame, top) share: loading a
// trace file with one message, writing output whole, and one-line frame wording.
//
// Contract: single-threaded CLI code; every failure prints one line naming the file
// ("cdsa CMD: FILE: what is wrong") and returns false.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "cli/options.h"
#include "report/trace.h"
#include "report/trace_reader.h"

namespace cdsa::cli {

// Loads FILE or prints "cdsa CMD: FILE: what is wrong".
bool load(const char* cmd, const std::string& path, report::TraceFile* tf);
// Prints "cdsa CMD: " and the status's line on stderr.
void fail(const char* cmd, const base::Status& status);
// Loads FILE and insists on a launch-site profile (flame, top).
bool load_profile(const char* cmd, const std::string& path, report::TraceFile* tf);

enum class Needs { Trace, Profile };
// The start of a command that reads one trace FILE (report, flame, top): parses the command line (`positional`
// stores FILE in `path`), insists on FILE, loads it (and its profile, for Needs::Profile). kGoOn with `tf` loaded,
// else the exit status, the message printed.
int parse_and_load(const CommandLine& cl, int argc, char** argv, const std::string& path, Needs needs,
                   report::TraceFile* tf);

// Writes all of `s` to `fd` (retrying on EINTR and short writes).
bool write_all(int fd, const std::string& s);
// Writes `s` to stdout after whatever stdio holds.
bool print_stdout(const std::string& s);

// "file:line in function"; "function (module+0x1f) at file:line".
std::string frame_line(const report::PyFrame& f);
std::string frame_line(const report::ResolvedFrame& f);

// The innermost Python frame (the user's line), else the innermost named native frame.
std::string site_of(const report::CallStack& st);

// The trace's stacks by id.
std::map<uint32_t, const report::CallStack*> stacks_by_id(const report::TraceData& t);

}  // namespace cdsa::cli
