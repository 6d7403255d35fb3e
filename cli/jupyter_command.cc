// `cdsa jupyter install|uninstall`: a Jupyter kernelspec whose IPython kernel runs under `cdsa run`.
//
// install asks the kernel's Python (a probe run with it) for ipykernel's own kernel.json (ipykernel.kernelspec's
// get_kernel_dict: the argv, language, metadata that ipykernel version writes), its sys.prefix and its Jupyter
// data directory, then writes KERNELS/NAME/kernel.json with argv = [this cdsa (real path), "run", "--",
// ipykernel's argv...] and metadata.cdsa, plus ipykernel's logos. The preload is in argv, never in the
// kernelspec's "env" (which would replace an LD_PRELOAD the user already has): `cdsa run` adds libcdsa.so to the
// LD_PRELOAD the kernel inherits. uninstall removes KERNELS/NAME only when its kernel.json has metadata.cdsa.
// Where KERNELS is: cli/kernelspec.h.
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/version.h"
#include "cli/commands.h"
#include "cli/kernelspec.h"
#include "cli/locate.h"
#include "cli/options.h"
#include "cli/process.h"

namespace cdsa::cli {
namespace {

constexpr const char kDefaultName[] = "python3-cdsa";
constexpr const char kDefaultDisplayName[] = "Python 3 (cdsa)";

const char kHelp[] =
    "usage: cdsa jupyter install [--name NAME] [--display-name TEXT] [--user | --sys-prefix | --prefix DIR]\n"
    "                            [--python PATH] [-- RUN-OPTIONS...]\n"
    "       cdsa jupyter uninstall NAME [--user | --sys-prefix | --prefix DIR] [--python PATH]\n"
    "\n"
    "install writes a Jupyter kernelspec that starts PYTHON's IPython kernel (ipykernel) under `cdsa run`, so a\n"
    "notebook's CUDA fault is reported in the output of the cell that surfaced it. Its kernel.json is ipykernel's\n"
    "own with argv = [this cdsa, run, --, PYTHON, -m, ipykernel_launcher, -f, {connection_file}] and\n"
    "metadata.cdsa; it sets no environment, so an LD_PRELOAD the user already has is kept (libcdsa.so is added\n"
    "to it). An existing cdsa kernelspec of that name is replaced; any other is never touched.\n"
    "\n"
    "  --name NAME          the kernel's name (default python3-cdsa): letters, digits, '.', '_', '-'\n"
    "                       (lower-cased, as Jupyter does)\n"
    "  --display-name TEXT  the name the notebook's kernel list shows (default \"Python 3 (cdsa)\")\n"
    "  --user               in the user's Jupyter data directory (the default): $JUPYTER_DATA_DIR, else\n"
    "                       ~/.local/share/jupyter (as PYTHON's jupyter_core says)\n"
    "  --sys-prefix         in PYTHON's sys.prefix/share/jupyter (a venv or conda environment)\n"
    "  --prefix DIR         in DIR/share/jupyter\n"
    "  --python PATH        the kernel's Python, which must have ipykernel (default: python3 on PATH; the `cdsa`\n"
    "                       command of a pip install and `python -m cdsa` pass the Python cdsa is installed in)\n"
    "  -- RUN-OPTIONS...    `cdsa run` options for the kernel (cdsa run --help), checked now and written into\n"
    "                       argv before its --, e.g. -- --trace-file /scratch/cdsa-%p.json --backend cupti\n"
    "\n"
    "uninstall removes the kernelspec NAME from the same place (the same options say where) when cdsa wrote it\n"
    "(metadata.cdsa in its kernel.json) and refuses any other. `cdsa doctor` lists cdsa's kernelspecs on the\n"
    "Jupyter path. Exit status: 0 done, 1 refused or failed (one message says why), 2 usage error.\n";

// What the kernel's Python says about itself: one line "cdsa-probe=<JSON>".
constexpr const char kProbe[] = R"PY(import json, sys, importlib.util
out = {"executable": sys.executable, "prefix": sys.prefix, "version": "%d.%d.%d" % tuple(sys.version_info[:3])}
try:
    from jupyter_core.paths import jupyter_data_dir, jupyter_path
    out["data_dir"] = jupyter_data_dir()
    out["kernel_dirs"] = jupyter_path("kernels")
except Exception:
    pass
if importlib.util.find_spec("ipykernel") is None:
    out["ipykernel_error"] = "it has no ipykernel"
elif "--kernel" in sys.argv:
    try:
        from ipykernel.kernelspec import get_kernel_dict, RESOURCES
        out["kernel"] = get_kernel_dict()
        out["resources"] = str(RESOURCES)
    except Exception as e:
        out["ipykernel_error"] = "its ipykernel.kernelspec cannot be imported (%s: %s)" % (type(e).__name__, e)
print("cdsa-probe=" + json.dumps(out))
)PY";

enum class Where { Unset, User, SysPrefix, Prefix };

struct Args {
  std::string name = kDefaultName, display_name = kDefaultDisplayName, python = "python3", prefix;
  Where where = Where::Unset;
};

struct Probe {
  bool ran = false;
  std::string error;  // why it cannot be used ("" when it can)
  nlohmann::json data;
};

Probe probe_python(const std::string& python, bool want_kernel) {
  Probe p;
  std::string out, err;
  std::vector<std::string> args = {python, "-c", kProbe};
  if (want_kernel) args.push_back("--kernel");
  const int rc = capture(args, &out, &err);
  const std::string line = field(out, "cdsa-probe");
  if (rc == 127 && line.empty()) {
    p.error = "cannot run it (no such program)";
    return p;
  }
  if (rc != 0 || line.empty()) {
    std::string last = err;
    while (!last.empty() && last.back() == '\n') last.pop_back();
    if (size_t nl = last.rfind('\n'); nl != std::string::npos) last = last.substr(nl + 1);
    p.error = "it did not answer cdsa's probe (exit " + std::to_string(rc) + (last.empty() ? "" : ": " + last) + ")";
    return p;
  }
  p.data = nlohmann::json::parse(line, nullptr, false);
  if (!p.data.is_object() || !p.data.contains("executable") || !p.data["executable"].is_string() ||
      p.data["executable"].get<std::string>().empty()) {
    p.error = "it did not answer cdsa's probe with its sys.executable";
    return p;
  }
  p.ran = true;
  return p;
}

std::string str(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return path;
  return std::string(cwd) + "/" + path;
}

// KERNELS for the chosen place, or "" (*why says why).
std::string kernels_dir(const Args& a, const Probe& p, std::string* why) {
  switch (a.where) {
    case Where::Prefix:
      return absolute(a.prefix) + "/share/jupyter/kernels";
    case Where::SysPrefix:
      if (!p.ran) {
        *why = "--sys-prefix needs the Python: " + a.python + ": " + p.error;
        return "";
      }
      return str(p.data, "prefix") + "/share/jupyter/kernels";
    case Where::Unset:
    case Where::User: {
      std::string d = p.ran ? str(p.data, "data_dir") : "";
      return (d.empty() ? user_jupyter_data_dir() : d) + "/kernels";
    }
  }
  return "";
}

bool make_dirs(const std::string& path) {
  std::string cur;
  for (size_t pos = 0; pos <= path.size();) {
    size_t end = path.find('/', pos);
    if (end == std::string::npos) end = path.size();
    cur = path.substr(0, end);
    if (!cur.empty() && mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
    pos = end + 1;
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool write_file(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".cdsa-tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o.write(data.data(), static_cast<std::streamsize>(data.size())) || !o.flush()) {
      unlink(tmp.c_str());
      return false;
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool copy_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return false;
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return write_file(to, data);
}

bool is_empty_dir(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (!d) return false;
  bool empty = true;
  while (const dirent* e = readdir(d))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = false;
  closedir(d);
  return empty;
}

// The options of both subcommands; install also takes --name and --display-name.
CommandLine command_line(const char* sub, Args& a, int* where_count, bool install) {
  CommandLine cl{std::string("jupyter ") + sub, kHelp};
  cl.unknown_hint = " (see cdsa jupyter --help)";
  auto where = [&a, where_count](Where w) {
    return [&a, where_count, w](const char*) {
      a.where = w;
      ++*where_count;
      return true;
    };
  };
  cl.options.push_back({"--user", false, where(Where::User)});
  cl.options.push_back({"--sys-prefix", false, where(Where::SysPrefix)});
  cl.options.push_back({"--prefix", true,
                        [&a, where_count](const char* v) {
                          if (!*v) return false;
                          a.prefix = v;
                          a.where = Where::Prefix;
                          ++*where_count;
                          return true;
                        },
                        "a directory"});
  cl.options.push_back({"--python", true, store_text(a.python), "the path of a Python"});
  if (install) {
    cl.options.push_back({"--name", true, store_text(a.name, /*empty_ok=*/true), "a kernel name"});
    cl.options.push_back({"--display-name", true, store_text(a.display_name), "a text"});
  }
  return cl;
}

// Lower-cases NAME (as jupyter_client does) and checks it; false after printing why.
bool check_name(const char* sub, std::string* name) {
  const std::string given = *name;
  for (auto& c : *name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (valid_kernel_name(*name)) return true;
  fprintf(stderr,
          "cdsa jupyter %s: '%s' is not a Jupyter kernel name (letters, digits, '.', '_' and '-' only)\n", sub,
          given.c_str());
  return false;
}

int install(int argc, char** argv) {
  Args a;
  int where_count = 0;
  CommandLine cl = command_line("install", a, &where_count, true);
  cl.positional = [](const char* arg) {
    fprintf(stderr, "cdsa jupyter install: unexpected argument %s (the name goes after --name)\n", arg);
    return 2;
  };
  // After "--": options of the kernel's `cdsa run`.
  int own = 0;
  while (own < argc && strcmp(argv[own], "--") != 0) ++own;
  std::vector<std::string> run_options(argv + std::min(own + 1, argc), argv + argc);
  if (int rc = parse_command_line(cl, own, argv); rc != kGoOn) return rc;
  if (own < argc && !valid_run_options("jupyter install", run_options)) return 2;
  if (where_count > 1) {
    fprintf(stderr, "cdsa jupyter install: --user, --sys-prefix and --prefix exclude each other: give one\n");
    return 2;
  }
  if (!check_name("install", &a.name)) return 1;
  const std::string lib = find_libcdsa();
  char self[PATH_MAX];
  if (lib.empty() || !realpath("/proc/self/exe", self)) {
    fprintf(stderr, "cdsa jupyter install: libcdsa.so not found next to this cdsa (%s): the kernel could not "
                    "start under it; reinstall cdsa\n", self_dir().c_str());
    return 1;
  }
  Probe p = probe_python(a.python, true);
  if (p.ran) p.error = str(p.data, "ipykernel_error");
  if (!p.error.empty() || !p.data.contains("kernel") || !p.data["kernel"].is_object()) {
    fprintf(stderr, "cdsa jupyter install: --python %s: %s%s\n", a.python.c_str(),
            p.error.empty() ? "ipykernel gave no kernel.json" : p.error.c_str(),
            p.ran && p.error == "it has no ipykernel"
                ? ("; install it (" + a.python + " -m pip install ipykernel) or name another --python").c_str()
                : "");
    return 1;
  }
  std::string why;
  const std::string kernels = kernels_dir(a, p, &why);
  if (kernels.empty()) {
    fprintf(stderr, "cdsa jupyter install: %s\n", why.c_str());
    return 1;
  }
  const std::string dir = kernels + "/" + a.name;
  bool replaced = false;
  struct stat st;
  if (lstat(dir.c_str(), &st) == 0) {
    KernelSpec old = read_kernel_spec(dir);
    if (S_ISDIR(st.st_mode) && old.cdsa) {
      replaced = true;
    } else if (!(S_ISDIR(st.st_mode) && is_empty_dir(dir))) {
      fprintf(stderr,
              "cdsa jupyter install: %s exists and is not a cdsa kernelspec (%s); not touched: choose another "
              "--name\n",
              dir.c_str(), !S_ISDIR(st.st_mode) ? "not a directory" : old.readable ? "no metadata.cdsa" : "no kernel.json");
      return 1;
    }
  }
  const std::string python = str(p.data, "executable");
  nlohmann::json kernel = p.data["kernel"];
  std::vector<std::string> args = {self, "run"};
  args.insert(args.end(), run_options.begin(), run_options.end());
  args.push_back("--");
  if (kernel.contains("argv") && kernel["argv"].is_array())
    for (auto& e : kernel["argv"])
      if (e.is_string()) args.push_back(e.get<std::string>());
  if (args.size() < run_options.size() + 4) args.insert(args.end(), {python, "-m", "ipykernel_launcher", "-f", "{connection_file}"});
  kernel["argv"] = args;
  kernel["display_name"] = a.display_name;
  kernel.erase("env");
  if (!kernel.contains("metadata") || !kernel["metadata"].is_object()) kernel["metadata"] = nlohmann::json::object();
  kernel["metadata"]["cdsa"] = {
      {"version", CDSA_VERSION}, {"python", python}, {"cdsa", self}, {"run_options", run_options}};
  if (!make_dirs(dir)) {
    fprintf(stderr, "cdsa jupyter install: cannot create %s: %s\n", dir.c_str(), strerror(errno));
    return 1;
  }
  // ipykernel's logos first (what `python -m ipykernel install` copies), then kernel.json.
  if (const std::string res = str(p.data, "resources"); !res.empty())
    if (DIR* d = opendir(res.c_str())) {
      while (const dirent* e = readdir(d)) {
        const std::string from = res + "/" + e->d_name;
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "kernel.json") || !is_file(from)) continue;
        copy_file(from, dir + "/" + e->d_name);  // a logo that cannot be copied costs only the logo
      }
      closedir(d);
    }
  if (!write_file(dir + "/kernel.json", kernel.dump(1) + "\n")) {
    fprintf(stderr, "cdsa jupyter install: cannot write %s/kernel.json: %s\n", dir.c_str(), strerror(errno));
    return 1;
  }
  printf("%s kernelspec %s (\"%s\") in %s\n", replaced ? "Replaced" : "Installed", a.name.c_str(),
         a.display_name.c_str(), dir.c_str());
  std::string with;
  for (const auto& o : run_options) with += " " + o;
  printf("  it starts %s -m ipykernel_launcher under %s run%s\n", python.c_str(), self, with.c_str());
  bool on_path = false;
  if (auto kd = p.data.find("kernel_dirs"); kd != p.data.end() && kd->is_array())
    for (auto& e : *kd)
      if (e.is_string() && e.get<std::string>() == kernels) on_path = true;
  if (!on_path)
    printf("  note: %s is not on %s's Jupyter path; a Jupyter finds it with JUPYTER_PATH=%s\n", kernels.c_str(),
           python.c_str(), kernels.substr(0, kernels.size() - strlen("/kernels")).c_str());
  return 0;
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return remove(path); }

int uninstall(int argc, char** argv) {
  Args a;
  int where_count = 0;
  std::vector<std::string> names;
  CommandLine cl = command_line("uninstall", a, &where_count, false);
  cl.positional = [&names](const char* arg) {
    names.push_back(arg);
    return kGoOn;
  };
  if (int rc = parse_command_line(cl, argc, argv); rc != kGoOn) return rc;
  if (where_count > 1) {
    fprintf(stderr, "cdsa jupyter uninstall: --user, --sys-prefix and --prefix exclude each other: give one\n");
    return 2;
  }
  if (names.size() != 1) {
    fprintf(stderr, "cdsa jupyter uninstall: %s (usage: cdsa jupyter uninstall NAME [--user | --sys-prefix | "
                    "--prefix DIR] [--python PATH])\n", names.empty() ? "no kernel name given" : "one name at a time");
    return 2;
  }
  std::string name = names[0];
  if (!check_name("uninstall", &name)) return 1;
  // The Python is asked only where it decides the place (its sys.prefix, its jupyter_core's data directory).
  Probe p;
  if (a.where != Where::Prefix) p = probe_python(a.python, false);
  std::string why;
  const std::string kernels = kernels_dir(a, p, &why);
  if (kernels.empty()) {
    fprintf(stderr, "cdsa jupyter uninstall: %s\n", why.c_str());
    return 1;
  }
  const std::string dir = kernels + "/" + name;
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) {
    std::string elsewhere;
    std::vector<std::string> dirs;
    if (auto kd = p.data.find("kernel_dirs"); p.ran && kd != p.data.end() && kd->is_array())
      for (auto& e : *kd)
        if (e.is_string()) dirs.push_back(e.get<std::string>());
    if (dirs.empty()) dirs = fallback_kernel_dirs(p.ran ? str(p.data, "prefix") : "");
    for (auto& k : dirs)
      if (k != kernels && read_kernel_spec(k + "/" + name).cdsa) elsewhere += (elsewhere.empty() ? "" : ", ") + k;
    fprintf(stderr, "cdsa jupyter uninstall: no kernelspec %s in %s%s%s%s\n", name.c_str(), kernels.c_str(),
            elsewhere.empty() ? "" : " (a cdsa one is in ", elsewhere.c_str(),
            elsewhere.empty() ? "" : ": say where with --user, --sys-prefix or --prefix)");
    return 1;
  }
  KernelSpec k = read_kernel_spec(dir);
  if (!S_ISDIR(st.st_mode) || !k.cdsa) {
    fprintf(stderr,
            "cdsa jupyter uninstall: %s is not a cdsa kernelspec (%s); not removed (`jupyter kernelspec remove %s` "
            "removes any)\n",
            dir.c_str(),
            S_ISLNK(st.st_mode) ? "a symbolic link"
            : !S_ISDIR(st.st_mode) ? "not a directory"
            : k.readable           ? "no metadata.cdsa in its kernel.json"
                                   : "no readable kernel.json",
            name.c_str());
    return 1;
  }
  if (nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    fprintf(stderr, "cdsa jupyter uninstall: cannot remove %s: %s\n", dir.c_str(), strerror(errno));
    return 1;
  }
  printf("Removed kernelspec %s (\"%s\") from %s\n", name.c_str(), k.display_name.c_str(), kernels.c_str());
  return 0;
}

}  // namespace

int cmd_jupyter(int argc, char** argv) {
  if (argc < 1) {
    fprintf(stderr, "cdsa jupyter: install or uninstall? (see cdsa jupyter --help)\n");
    return 2;
  }
  if (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
    fputs(kHelp, stdout);
    return 0;
  }
  if (!strcmp(argv[0], "install")) return install(argc - 1, argv + 1);
  if (!strcmp(argv[0], "uninstall")) return uninstall(argc - 1, argv + 1);
  fprintf(stderr, "cdsa jupyter: unknown subcommand '%s': install or uninstall (see cdsa jupyter --help)\n", argv[0]);
  return 2;
}

}  // namespace cdsa::cli
