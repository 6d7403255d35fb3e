#include "cli/kernelspec.h"

#include <dirent.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cdsa::cli {

bool valid_kernel_name(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

namespace {

std::string home_dir() {
  const char* home = getenv("HOME");
  if (home && *home) return home;
  const passwd* pw = getpwuid(getuid());
  return pw && pw->pw_dir ? pw->pw_dir : "/";
}

std::string rstrip_slash(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

std::string user_jupyter_data_dir() {
  if (const char* d = getenv("JUPYTER_DATA_DIR"); d && *d) return d;
  if (const char* x = getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/jupyter";
  return home_dir() + "/.local/share/jupyter";
}

std::vector<std::string> fallback_kernel_dirs(const std::string& prefix) {
  std::vector<std::string> data;
  if (const char* p = getenv("JUPYTER_PATH"); p && *p) {
    std::string s = p;
    for (size_t pos = 0; pos <= s.size();) {
      size_t end = s.find(':', pos);
      if (end == std::string::npos) end = s.size();
      if (end > pos) data.push_back(rstrip_slash(s.substr(pos, end - pos)));
      pos = end + 1;
    }
  }
  data.push_back(user_jupyter_data_dir());
  if (!prefix.empty()) data.push_back(rstrip_slash(prefix) + "/share/jupyter");
  data.push_back("/usr/local/share/jupyter");
  data.push_back("/usr/share/jupyter");
  std::vector<std::string> out;
  for (auto& d : data)
    if (std::find(out.begin(), out.end(), d + "/kernels") == out.end()) out.push_back(d + "/kernels");
  return out;
}

KernelSpec read_kernel_spec(const std::string& dir) {
  KernelSpec k;
  k.dir = dir;
  const size_t slash = dir.rfind('/');
  k.name = slash == std::string::npos ? dir : dir.substr(slash + 1);
  std::transform(k.name.begin(), k.name.end(), k.name.begin(), [](unsigned char c) { return std::tolower(c); });
  std::ifstream in(dir + "/kernel.json");
  if (!in) return k;
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return k;
  k.readable = true;
  if (auto d = j.find("display_name"); d != j.end() && d->is_string()) k.display_name = d->get<std::string>();
  if (auto a = j.find("argv"); a != j.end() && a->is_array())
    for (auto& e : *a)
      if (e.is_string()) k.argv.push_back(e.get<std::string>());
  if (auto m = j.find("metadata"); m != j.end() && m->is_object())
    if (auto c = m->find("cdsa"); c != m->end() && c->is_object()) k.cdsa = true;
  return k;
}

std::vector<KernelSpec> kernel_specs_in(const std::string& kernels) {
  std::vector<KernelSpec> out;
  DIR* d = opendir(kernels.c_str());
  if (!d) return out;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string path = kernels + "/" + e->d_name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || access((path + "/kernel.json").c_str(), F_OK) != 0)
      continue;
    KernelSpec k = read_kernel_spec(path);
    if (valid_kernel_name(k.name)) out.push_back(std::move(k));
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const KernelSpec& a, const KernelSpec& b) { return a.name < b.name; });
  return out;
}

}  // namespace cdsa::cli
