#include "shim/fault/process_facts.h"

#include <dlfcn.h>
#include <unistd.h>
#include <cstdlib>
#include <fstream>

#include "shim/common/config.h"
#include "shim/common/driver.h"
#include "shim/record/device_info.h"

namespace cdsa {
namespace {

// A variable holding a decimal integer in 0..2^30-1; -1 when it is unset, empty or anything else.
int env_int(const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < (1 << 30)) ? static_cast<int>(x) : -1;
}

}  // namespace

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

std::vector<std::string> process_argv() {
  std::vector<std::string> argv;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0')) argv.push_back(arg);
  return argv;
}

int process_rank() {
  for (const char* n : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "LOCAL_RANK"}) {
    int r = env_int(n);
    if (r >= 0) return r;
  }
  return -1;
}

int process_world_size() {
  for (const char* n : {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    int r = env_int(n);
    if (r > 0) return r;
  }
  return -1;
}

int process_local_rank() {
  int r = env_int("LOCAL_RANK");
  return r >= 0 ? r : env_int("SLURM_LOCALID");
}

report::Process process_facts(uint64_t start_unix_ns) {
  report::Process p;
  p.pid = getpid();
  p.host = host_name();
  p.session = config().session;  // the launcher tree (shim/intercept/launcher_summary.h)
  p.argv = process_argv();
  p.start_time_unix_ns = start_unix_ns;
  p.rank = process_rank();
  p.world_size = process_world_size();
  p.local_rank = process_local_rank();
  const Driver& d = driver();
  if (d.DriverGetVersion) d.DriverGetVersion(&p.driver_version);
  // A shared cudart (PyTorch's) answers without touching the dead context; a static one is invisible here.
  using RuntimeVersionFn = int (*)(int*);
  if (auto rv = reinterpret_cast<RuntimeVersionFn>(dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion")))
    if (rv(&p.runtime_version) != 0) p.runtime_version = 0;
  DeviceInfo dev;  // named at a launch, while the context was alive
  if (context_device(0, &dev)) p.gpu = dev.name;
  return p;
}

std::string expand_trace_pattern(const std::string& pattern, const std::string& host, int pid, int rank,
                                 uint64_t start_unix_s) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    char c = pattern[++i];
    switch (c) {
      case 'h': out += host; break;
      case 'p': out += std::to_string(pid); break;
      case 'r': out += rank >= 0 ? std::to_string(rank) : std::string("norank"); break;
      case 'R': out += rank >= 0 ? "-rank" + std::to_string(rank) : std::string(); break;
      case 't': out += std::to_string(start_unix_s); break;
      case '%': out += '%'; break;
      default: out += '%'; out += c;
    }
  }
  return out;
}

std::string trace_path_for_process(uint64_t start_unix_ns) {
  return expand_trace_pattern(config().trace_pattern, host_name(), getpid(), process_rank(),
                              start_unix_ns / 1000000000ull);
}

}  // namespace cdsa
