#include "cli/trace_common.h"

#include <fmt/format.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>

#include "base/io.h"
#include "base/path.h"

namespace cdsa::cli {

bool load(const char* cmd, const std::string& path, report::TraceFile* tf) {
  base::StatusOr<report::TraceFile> read = report::read_trace_file(path);
  if (read.ok()) {
    *tf = std::move(*read);
    return true;
  }
  fail(cmd, read.status().prefixed(path));
  return false;
}

void fail(const char* cmd, const base::Status& status) {
  fprintf(stderr, "cdsa %s: %s\n", cmd, status.message().c_str());
}

bool load_profile(const char* cmd, const std::string& path, report::TraceFile* tf) {
  if (!load(cmd, path, tf)) return false;
  if (!tf->data.has_profile) {
    fprintf(stderr,
            "cdsa %s: %s: no launch-site profile in this trace (run with CDSA_PROFILE=1 or cdsa run --profile)\n", cmd,
            path.c_str());
    return false;
  }
  return true;
}

int parse_and_load(const CommandLine& cl, int argc, char** argv, const std::string& path, Needs needs,
                   report::TraceFile* tf) {
  if (int rc = parse_command_line(cl, argc, argv); rc != kGoOn) return rc;
  if (path.empty()) return usage_error(cl);
  const char* cmd = cl.command.c_str();
  return (needs == Needs::Profile ? load_profile(cmd, path, tf) : load(cmd, path, tf)) ? kGoOn : 1;
}

bool write_all(int fd, const std::string& s) { return base::write_all(fd, s.data(), s.size()); }

bool print_stdout(const std::string& s) {
  fflush(stdout);
  return write_all(1, s);
}

using base::basename_of;

std::string frame_line(const report::PyFrame& f) { return fmt::format("{}:{} in {}", f.file, f.line, f.function); }

std::string frame_line(const report::ResolvedFrame& f) {
  std::string s =
      fmt::format("{} ({}+{:#x})", f.function.empty() ? "??" : f.function, basename_of(f.module), f.module_offset);
  if (!f.file.empty()) s += fmt::format(" at {}:{}", f.file, f.line);
  return s;
}

std::string site_of(const report::CallStack& st) {
  if (!st.python.empty()) return frame_line(st.python.front());
  for (const auto& f : st.native)
    if (!f.function.empty()) return frame_line(f);
  return st.native.empty() ? "(no stack recorded)" : frame_line(st.native.front());
}

std::map<uint32_t, const report::CallStack*> stacks_by_id(const report::TraceData& t) {
  std::map<uint32_t, const report::CallStack*> stacks;
  for (const auto& [id, st] : t.stacks) stacks[id] = &st;
  return stacks;
}

}  // namespace cdsa::cli
