#include "cli/trace_common.h"

#include <fmt/format.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>

namespace cdsa::cli {

bool load(const char* cmd, const std::string& path, TraceFile* tf) {
  std::string error;
  if (read_trace_file(path, tf, &error)) return true;
  fprintf(stderr, "cdsa %s: %s: %s\n", cmd, path.c_str(), error.c_str());
  return false;
}

bool load_profile(const char* cmd, const std::string& path, TraceFile* tf) {
  if (!load(cmd, path, tf)) return false;
  if (!tf->data.has_profile) {
    fprintf(stderr,
            "cdsa %s: %s: no launch-site profile in this trace (run with CDSA_PROFILE=1 or cdsa run --profile)\n", cmd,
            path.c_str());
    return false;
  }
  return true;
}

bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool print_stdout(const std::string& s) {
  fflush(stdout);
  return write_all(1, s);
}

std::string base_name(const std::string& path) {
  auto p = path.rfind('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

std::string frame_line(const PyFrameText& f) { return fmt::format("{}:{} in {}", f.file, f.line, f.function); }

std::string frame_line(const NativeFrameText& f) {
  std::string s =
      fmt::format("{} ({}+{:#x})", f.function.empty() ? "??" : f.function, base_name(f.module), f.module_offset);
  if (!f.file.empty()) s += fmt::format(" at {}:{}", f.file, f.line);
  return s;
}

std::string site_of(const StackText& st) {
  if (!st.python.empty()) return frame_line(st.python.front());
  for (const auto& f : st.native)
    if (!f.function.empty()) return frame_line(f);
  return st.native.empty() ? "(no stack recorded)" : frame_line(st.native.front());
}

std::map<uint32_t, const StackText*> stacks_by_id(const TraceData& t) {
  std::map<uint32_t, const StackText*> stacks;
  for (const auto& [id, st] : t.stacks) stacks[id] = &st;
  return stacks;
}

}  // namespace cdsa::cli
