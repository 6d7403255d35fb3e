#include "symbolizer/libdw_loader.h"

#include "symbolizer/bundled_dlopen.h"

#include <dlfcn.h>

#include <atomic>
#include <climits>

#include <cstdlib>
#include <cstring>

namespace cdsa::symbolizer::internal {

namespace {

constexpr const char kFallbackWhat[] =
    "live frames use dladdr (exported symbols only), offline frames use the ELF "
    "symbol table; no file:line, no inlined frames";

// choose_libdw(): read once, by the first dw_api().
std::atomic<const char*> g_choice_path{nullptr};
std::atomic<bool> g_choice_disabled{false};

DwApi load() {
  DwApi api;
#if !CDSA_HAVE_LIBDWFL_H
  api.description = std::string("libdw support not compiled in (elfutils headers missing): ") + kFallbackWhat;
  return api;
#else
  if (g_choice_disabled.load(std::memory_order_acquire)) {
    api.description = std::string("libdw disabled by CDSA_SYMBOLIZER_NO_LIBDW: ") + kFallbackWhat;
    return api;
  }
  // The chosen path, else the copy shipped with cdsa (the wheel's cdsa/lib/vendor/), else the system's.
  const char* path = g_choice_path.load(std::memory_order_acquire);
  char used[PATH_MAX], why[1024];
  void* h = nullptr;
  if (path != nullptr && path[0] != '\0') {
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* err = dlerror();
      snprintf(why, sizeof why, "%s: %s", path, err ? err : "unknown error");
    }
  } else {
    h = bundled::dlopen_bundled_first("libdw.so.1", reinterpret_cast<const void*>(&load), used, sizeof used, why,
                                      sizeof why);
    path = used;
  }
  if (h == nullptr) {
    api.description = std::string("libdw unavailable (dlopen ") + why + "): " + kFallbackWhat;
    return api;
  }
  std::string missing;
#define CDSA_DW_RESOLVE(name)                                       \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(h, #name)); \
  if (api.name == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  CDSA_DW_FUNCTIONS(CDSA_DW_RESOLVE)
#undef CDSA_DW_RESOLVE
  if (!missing.empty()) {
    // Keep the handle open: harmless, and avoids unloading code that a
    // partially-resolved pointer might reference.
    api = DwApi{};
    api.description = std::string("libdw unusable (") + path + " lacks " + missing + "): " + kFallbackWhat;
    return api;
  }
  api.ok = true;
  const char* ver = api.dwfl_version(nullptr);
  api.description = std::string("libdw ") + (ver ? ver : "?") + " (dlopen " + path +
                    "): .symtab/DWARF symbols, file:line, inlined frames";
  return api;
#endif
}

}  // namespace

void choose_libdw(const char* path, bool disabled) {
  g_choice_path.store(path, std::memory_order_release);
  g_choice_disabled.store(disabled, std::memory_order_release);
}

const DwApi& dw_api() {
  static const DwApi api = load();
  return api;
}

std::mutex& libdw_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace cdsa::symbolizer::internal
