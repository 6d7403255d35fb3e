// `cdsa doctor`: says whether cdsa will work here, and why not.
//
// Checks, one line each: the architecture this cdsa was built for, and that of the libcdsa.so `cdsa run` would
// preload (an x86-64 library on an aarch64 host, or the other way round, is a failure); the libcdsa.so itself; the CUDA driver (libcuda.so.1 and the version
// cuDriverGetVersion reports: no cuInit, no context, no GPU memory) and the CUDA headers cdsa was built from; the
// Python that would run (its version against the frame walker's range, by running it with a short probe script);
// the unwinder (libunwind) and the symbolizer (libdw) that would be loaded, bundled or system; CUPTI for the
// optional backend; PyTorch and its CUDA version if the Python can import it (importing torch does not initialize
// CUDA); the cdsa kernelspecs on the Jupyter path (`cdsa jupyter install`); the CDSA_* variables; other
// LD_PRELOAD entries and known conflicts. Then one verdict line:
//   cdsa doctor: ready ...                 exit 0
//   cdsa doctor: usable, with limits: ...  exit 0 (the failing launch is named, with fewer frames)
//   cdsa doctor: not usable here: ...      exit 1 (no libcdsa.so, no driver, or no frames of any kind)
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/arch.h"
#include "base/io.h"
#include "base/path.h"
#include "base/version.h"
#include "cli/commands.h"
#include "cli/kernelspec.h"
#include "cli/locate.h"
#include "cli/process.h"
#include "cupti_tracer/discovery.h"
#include "shim/common/config.h"
#include "shim/stacks/python_stack.h"
#include "symbolizer/bundled_dlopen.h"
#include "symbolizer/native_symbolizer.h"

extern char** environ;

namespace cdsa::cli {
namespace {

enum class Level { Ok, Info, Warn, Fail };

struct Doctor {
  std::vector<std::string> limits, failures;

  void line(Level lv, const char* what, const std::string& text) {
    static const char* tags[] = {"ok", "info", "warn", "FAIL"};
    printf("  %-5s %-13s %s\n", tags[static_cast<int>(lv)], what, text.c_str());
  }
};

// What the Python probe prints: key=value lines. Importing torch is lazy about CUDA: no context is created.
constexpr const char kProbe[] = R"(import os, sys, site, sysconfig, importlib.util
v = sys.version_info
print("version=%d.%d.%d" % (v[0], v[1], v[2]))
print("major=%d" % v[0]); print("minor=%d" % v[1])
print("impl=" + sys.implementation.name)
print("gil_disabled=%d" % bool(sysconfig.get_config_var("Py_GIL_DISABLED")))
print("executable=" + str(sys.executable))
print("prefix=" + sys.prefix)
try:
    from jupyter_core.paths import jupyter_path
    print("jupyter_kernels=" + os.pathsep.join(jupyter_path("kernels")))
except Exception: pass
try: print("site=" + ":".join(site.getsitepackages()))
except Exception: pass
if importlib.util.find_spec("torch") is None: print("torch=")
else:
    try:
        import torch
        print("torch=" + torch.__version__); print("torch_cuda=" + str(torch.version.cuda))
    except Exception as e: print("torch_error=" + (str(e).splitlines() or ["?"])[0])
)";

// The ELF machine of a 64-bit little-endian shared object (e_machine: 2 bytes at offset 18 of the ELF header), or
// -1 when the file cannot be read or is not such an ELF file.
int elf_machine(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  unsigned char h[EI_NIDENT + 4] = {};
  const ssize_t n = base::read_full(fd, h, sizeof h);
  close(fd);
  if (n != static_cast<ssize_t>(sizeof h) || memcmp(h, ELFMAG, SELFMAG) != 0 || h[EI_CLASS] != ELFCLASS64 ||
      h[EI_DATA] != ELFDATA2LSB)
    return -1;
  return h[EI_NIDENT + 2] | (h[EI_NIDENT + 3] << 8);
}

// The name of an ELF machine cdsa may meet.
std::string machine_name(int m) {
  if (m == EM_X86_64) return "x86_64";
  if (m == EM_AARCH64) return "aarch64";
  return "ELF machine " + std::to_string(m);
}

// This cdsa's architecture, and that of the libcdsa.so it would preload: another architecture's library is not
// loadable into this host's programs at all.
void check_arch(Doctor& d, const std::string& lib) {
  std::string text = std::string("cdsa built for ") + arch::kName;
  const int m = lib.empty() ? -1 : elf_machine(lib);
  if (m >= 0 && m != arch::kElfMachine) {
    d.line(Level::Fail, "architecture", text + "; " + lib + " is built for " + machine_name(m));
    d.failures.push_back("libcdsa.so is built for " + machine_name(m) + ", not " + arch::kName);
    return;
  }
  d.line(Level::Ok, "architecture", text + (m >= 0 ? ", libcdsa.so too" : ""));
}

void check_lib(Doctor& d, const std::string& lib) {
  if (lib.empty())
    d.line(Level::Fail, "libcdsa.so", "not found next to this cdsa (../lib/libcdsa.so); `cdsa run --lib PATH` needed");
  else
    d.line(Level::Ok, "libcdsa.so", lib);
  if (lib.empty()) d.failures.push_back("libcdsa.so not found");
}

// The CUDA version of the headers the wrappers were generated from, beside the driver's (0: none answered). Entry
// points of a driver newer than the headers pass through unwrapped (a thunk: no verdict is exact once one that
// submits work is called); the other way round, cdsa never calls what the driver lacks.
void headers_line(Doctor& d, int driver) {
  const int h = CDSA_CUDA_HEADER_VERSION;
  char text[192];
  int n = snprintf(text, sizeof text, "cdsa was built from CUDA %d.%d headers", h / 1000, (h % 1000) / 10);
  if (driver > 0 && n > 0)
    snprintf(text + n, sizeof text - n, "; the driver is CUDA %d.%d%s", driver / 1000, (driver % 1000) / 10,
             driver > h ? ": its newer entry points pass through unwrapped" : "");
  d.line(Level::Ok, "CUDA headers", text);
}

void check_driver(Doctor& d) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* err = dlerror();
    d.line(Level::Fail, "CUDA driver", std::string("libcuda.so.1 not loadable (") + (err ? err : "?") + ")");
    d.failures.push_back("no CUDA driver (libcuda.so.1)");
    headers_line(d, 0);
    return;
  }
  std::string where = "libcuda.so.1";
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]) where = lm->l_name;
  // cuDriverGetVersion needs no cuInit and creates nothing.
  auto get_version = reinterpret_cast<int (*)(int*)>(dlsym(h, "cuDriverGetVersion"));
  int v = 0;
  if (!get_version || get_version(&v) != 0) {
    d.line(Level::Fail, "CUDA driver", where + ": cuDriverGetVersion failed");
    d.failures.push_back("the CUDA driver does not answer cuDriverGetVersion");
    headers_line(d, 0);
    return;
  }
  char text[64];
  snprintf(text, sizeof text, "CUDA %d.%d", v / 1000, (v % 1000) / 10);
  d.line(Level::Ok, "CUDA driver", std::string(text) + " (" + where + ")");
  headers_line(d, v);
}

// Returns whether Python frames will be recorded; fills *probe with the probe's output.
bool check_python(Doctor& d, const std::string& python, std::string* probe) {
  int rc = capture({python, "-c", kProbe}, probe);
  if (rc != 0) {
    d.line(Level::Warn, "Python",
           python + ": could not run it (exit " + std::to_string(rc) +
               "); only processes of a supported CPython get Python frames");
    d.limits.push_back("no Python checked");
    return false;
  }
  const std::string ver = field(*probe, "version"), impl = field(*probe, "impl");
  const int major = atoi(field(*probe, "major").c_str()), minor = atoi(field(*probe, "minor").c_str());
  std::string what = "CPython " + ver + " (" + field(*probe, "executable") + ")";
  char range[64];
  snprintf(range, sizeof range, "3.%d-3.%d", kPythonMinMinor, kPythonMaxMinor);
  std::string why;
  if (impl != "cpython")
    why = impl + " is not CPython";
  else if (major != 3 || minor < kPythonMinMinor || minor > kPythonMaxMinor)
    why = "CPython " + ver + " is outside " + range;
  else if (field(*probe, "gil_disabled") == "1")
    why = "free-threaded builds are not supported";
  // An interpreter of another architecture (an x86-64 Python under emulation on a Grace host, or the other way
  // round) cannot load this libcdsa.so at all.
  const int m = elf_machine(field(*probe, "executable"));
  if (why.empty() && m >= 0 && m != arch::kElfMachine)
    why = "it is built for " + machine_name(m) + ", cdsa for " + arch::kName;
  if (!why.empty()) {
    d.line(Level::Warn, "Python", what + ": no Python frames (" + why + "); native frames only");
    d.limits.push_back("no Python frames (" + why + ")");
    return false;
  }
  d.line(Level::Ok, "Python", what + ": Python frames supported (" + range + ")");
  return true;
}

// Returns whether native frames will be recorded.
bool check_unwinder(Doctor& d, const std::string& lib) {
  std::string vendor = base::dirname_of(lib) + "/vendor";
  const char* dirs[1] = {vendor.c_str()};
  char used[PATH_MAX], why[1024];
  void* h =
      bundled::dlopen_dirs_then_system("libunwind.so.8", dirs, lib.empty() ? 0 : 1, used, sizeof used, why, sizeof why);
  if (!h || !dlsym(h, "unw_backtrace")) {
    d.line(Level::Warn, "unwinder",
           std::string("no usable libunwind (") + (h ? "no unw_backtrace" : why) + "): no native frames");
    d.limits.push_back("no native frames (no libunwind)");
    return false;
  }
  const bool bundled = strncmp(used, vendor.c_str(), vendor.size()) == 0;
  d.line(Level::Ok, "unwinder", std::string("libunwind ") + (bundled ? "bundled: " : "system: ") + used);
  return true;
}

void check_symbolizer(Doctor& d) {
  const std::string desc = symbolizer::symbolizer_backend_description();
  const bool libdw = desc.rfind("libdw ", 0) == 0;  // "libdw <version> (dlopen PATH): ..."
  d.line(libdw ? Level::Ok : Level::Warn, "symbolizer", desc);
  if (!libdw) d.limits.push_back("symbols without file:line (no libdw)");
}

void check_cupti(Doctor& d, const std::string& probe) {
  cupti::SearchInputs in = cupti::current_search_inputs();
  const std::string site = field(probe, "site");
  for (size_t pos = 0; !site.empty() && pos <= site.size();) {
    size_t end = site.find(':', pos);
    if (end == std::string::npos) end = site.size();
    if (end > pos) in.python_dirs.push_back(site.substr(pos, end - pos));
    pos = end + 1;
  }
  std::string other;  // a candidate built for another architecture (an x86-64 toolkit copied to a Grace host)
  for (const auto& cand : cupti::cupti_candidates(in)) {
    if (cand.find('/') == std::string::npos) continue;  // a bare soname: not loaded here (no CUDA code runs)
    const int m = elf_machine(cand);
    if (m >= 0 && m != arch::kElfMachine) {
      if (other.empty()) other = cand + " (" + machine_name(m) + ")";
      continue;
    }
    d.line(Level::Ok, "CUPTI", cand + " (for --backend cupti; optional)");
    return;
  }
  if (!other.empty()) {
    d.line(Level::Warn, "CUPTI",
           "only one for another architecture: " + other + ", not " + arch::kName + " (only --backend cupti needs it)");
    return;
  }
  d.line(Level::Info, "CUPTI",
         "not found in " + cupti::join_dirs(cupti::cupti_search_dirs(in)) + " (only --backend cupti needs it)");
}

void check_torch(Doctor& d, const std::string& probe) {
  const std::string torch = field(probe, "torch"), err = field(probe, "torch_error");
  if (!err.empty())
    d.line(Level::Warn, "PyTorch", "installed but `import torch` failed: " + err);
  else if (torch.empty())
    d.line(Level::Info, "PyTorch", "not importable by this Python");
  else
    d.line(Level::Ok, "PyTorch", torch + ", built for CUDA " + field(probe, "torch_cuda"));
}

// cdsa's kernelspecs (`cdsa jupyter install`) on the Jupyter path of the checked Python (its jupyter_core's
// jupyter_path, else the same rules without it: cli/kernelspec.h), one line each; they do not change the verdict.
void check_jupyter(Doctor& d, const std::string& probe) {
  std::vector<std::string> dirs;
  const std::string listed = field(probe, "jupyter_kernels");
  for (size_t pos = 0; !listed.empty() && pos <= listed.size();) {
    size_t end = listed.find(':', pos);
    if (end == std::string::npos) end = listed.size();
    if (end > pos) dirs.push_back(listed.substr(pos, end - pos));
    pos = end + 1;
  }
  if (dirs.empty()) dirs = fallback_kernel_dirs(field(probe, "prefix"));
  std::vector<std::pair<std::string, std::string>> seen;  // (name, dir) found earlier on the path: Jupyter's pick
  int found = 0;
  for (const auto& kernels : dirs) {
    for (const KernelSpec& k : kernel_specs_in(kernels)) {
      std::string first;
      for (const auto& [name, dir] : seen)
        if (name == k.name) first = dir;
      if (first.empty()) seen.emplace_back(k.name, k.dir);
      if (!k.cdsa) continue;
      ++found;
      // argv = [cdsa, run, --, PYTHON, ...]
      const std::string cdsa = k.argv.empty() ? "" : k.argv[0];
      std::string python;
      for (size_t i = 0; i + 1 < k.argv.size(); ++i)
        if (k.argv[i] == "--") {
          python = k.argv[i + 1];
          break;
        }
      std::string text = k.name + " (\"" + k.display_name + "\") in " + kernels + ": " +
                         (python.empty() ? "no Python in its argv" : python);
      Level lv = Level::Ok;
      if (cdsa.empty() || access(cdsa.c_str(), X_OK) != 0) {
        text += "; its cdsa " + cdsa + " is gone: run `cdsa jupyter install --name " + k.name + "` again";
        lv = Level::Warn;
      } else if (python.empty() || access(python.c_str(), X_OK) != 0) {
        text += " is gone: `cdsa jupyter uninstall " + k.name + "`, or install it again with another --python";
        lv = Level::Warn;
      }
      if (!first.empty()) {
        text += "; hidden by " + first + ", earlier on the Jupyter path";
        lv = Level::Warn;
      }
      d.line(lv, "Jupyter", "kernelspec " + text);
    }
  }
  if (!found)
    d.line(Level::Info, "Jupyter", "no cdsa kernelspec on the Jupyter path (`cdsa jupyter install` adds one)");
}

void check_environment(Doctor& d) {
  // Bad or unknown CDSA_* values: the same messages a process that uses CUDA would print.
  for (const std::string& problem : config_problems(environ)) d.line(Level::Warn, "CDSA_*", problem);
  std::string set;
  for (char** e = environ; *e; ++e)
    if (!strncmp(*e, "CDSA_", 5)) set += (set.empty() ? "" : " ") + std::string(*e, strcspn(*e, "="));
  d.line(Level::Info, "CDSA_*", set.empty() ? "none set" : set);

  const char* pre = getenv("LD_PRELOAD");
  std::string others;
  for (const char* p = pre ? pre : ""; *p;) {
    size_t n = strcspn(p, ": ");
    std::string entry(p, n);
    p += n;
    if (*p) ++p;
    if (entry.empty() || entry.find("libcdsa") != std::string::npos) continue;
    others += (others.empty() ? "" : " ") + entry;
    const std::string base = base::basename_of(entry);
    if (base.rfind("libasan", 0) == 0 || base.rfind("libtsan", 0) == 0 || base.rfind("libclang_rt.", 0) == 0)
      d.line(Level::Info, "LD_PRELOAD", entry + ": a sanitizer runtime; `cdsa run` keeps it first, as it must be");
    if (base.find("cupti") != std::string::npos || base.find("ToolsInjection") != std::string::npos ||
        base.find("sanitizer") != std::string::npos)
      d.line(Level::Warn, "conflict", entry + ": another CUDA tool; it and cdsa's CUPTI backend exclude each other");
  }
  if (!others.empty()) d.line(Level::Info, "LD_PRELOAD", "other entries kept: " + others);
  if (const char* inj = getenv("CUDA_INJECTION64_PATH"); inj && *inj && !strstr(inj, "libcdsa"))
    d.line(Level::Warn, "conflict",
           std::string("CUDA_INJECTION64_PATH=") + inj +
               ": another CUPTI user (profiler?); --backend cupti cannot start beside it");
  if (const char* blocking = getenv("CUDA_LAUNCH_BLOCKING"); blocking && !strcmp(blocking, "1"))
    d.line(Level::Info, "CUDA_LAUNCH_BLOCKING", "=1: faults surface at their launch anyway; cdsa still reports");
}

void usage(FILE* out) {
  fprintf(out,
          "usage: cdsa doctor [--python PATH]\n"
          "Says whether cdsa will work here and why not: libcdsa.so, the CUDA driver (never initialized), the\n"
          "Python that would run (default: python3 on PATH), unwinder and symbolizer (bundled or system), CUPTI,\n"
          "PyTorch, cdsa's Jupyter kernelspecs on that Python's Jupyter path, CDSA_* variables, other LD_PRELOAD\n"
          "entries. Last line: the verdict; exit 0 when cdsa names the failing launch here (perhaps with limits), 1\n"
          "when it cannot.\n");
}

}  // namespace

int doctor_command(int argc, char** argv) {
  std::string python = "python3";
  for (int i = 0; i < argc; ++i) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--python") && i + 1 < argc) {
      python = argv[++i];
    } else {
      fprintf(stderr, "cdsa doctor: unexpected argument %s\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  printf("cdsa %s doctor\n", CDSA_VERSION);
  fflush(stdout);
  Doctor d;
  const std::string lib = find_libcdsa();
  check_arch(d, lib);
  check_lib(d, lib);
  check_driver(d);
  std::string probe;
  const bool python_frames = check_python(d, python, &probe);
  const bool native_frames = check_unwinder(d, lib);
  check_symbolizer(d);
  check_cupti(d, probe);
  check_torch(d, probe);
  check_jupyter(d, probe);
  fflush(stdout);
  check_environment(d);
  if (!python_frames && !native_frames) d.failures.push_back("no frames of any kind (no Python frames, no libunwind)");

  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (auto& x : v) s += (s.empty() ? "" : "; ") + x;
    return s;
  };
  if (!d.failures.empty()) {
    printf("cdsa doctor: not usable here: %s\n", join(d.failures).c_str());
    return 1;
  }
  if (!d.limits.empty()) {
    printf("cdsa doctor: usable, with limits: %s\n", join(d.limits).c_str());
    return 0;
  }
  printf("cdsa doctor: ready: a CUDA fault will be reported with its launch's Python line and native frames\n");
  return 0;
}

}  // namespace cdsa::cli
