#include "symbolizer/native_symbolizer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/path.h"
#include "symbolizer/elf_reader.h"
#include "symbolizer/libdw_loader.h"

#if CDSA_HAVE_LIBDWFL_H
#include <dwarf.h>
#endif

namespace cdsa::symbolizer {

using internal::dw_api;
using internal::DwApi;
using internal::ElfReader;
using internal::ElfSymbol;
using internal::libdw_mutex;

namespace {

using base::basename_of;

std::string hex_u64(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

void append_location(std::string* s, const std::string& file, int line) {
  if (file.empty()) return;
  *s += " at ";
  *s += basename_of(file);
  if (line > 0) {
    *s += ':';
    *s += std::to_string(line);
  }
}

// dladdr: exported (.dynsym) symbols of the mapped image; always consistent
// with what is in memory, whatever happened to the file on disk.
void fill_from_dladdr(uintptr_t lookup, uintptr_t pc, NativeFrame* f) {
  Dl_info info;
  std::memset(&info, 0, sizeof info);
  if (dladdr(reinterpret_cast<void*>(lookup), &info) != 0 && info.dli_sname != nullptr && info.dli_saddr != nullptr) {
    f->function = demangle(info.dli_sname);
    f->symbol_offset = pc - reinterpret_cast<uintptr_t>(info.dli_saddr);
  }
}

// Symbol lookup in a sorted ElfReader::function_symbols() list.
const ElfSymbol* lookup_symbol(const std::vector<ElfSymbol>& syms, uint64_t addr) {
  auto it =
      std::upper_bound(syms.begin(), syms.end(), addr, [](uint64_t a, const ElfSymbol& s) { return a < s.value; });
  // Walk back over a few candidates (nested or aliased symbols).
  for (int steps = 0; it != syms.begin() && steps < 64; ++steps) {
    --it;
    if (addr >= it->value && addr - it->value < it->size) return &*it;
  }
  return nullptr;
}

#if CDSA_HAVE_LIBDWFL_H

// ---------------------------------------------------------------------------
// libdwfl callbacks.

// Separate debug info lookup on the local file system only (no debuginfod,
// which could reach the network from inside a faulting program). Every
// candidate is verified against the module's build-id, or against the
// .gnu_debuglink CRC when the module has no build-id.
int local_find_debuginfo(Dwfl_Module* mod, void** /*userdata*/, const char* /*modname*/, Dwarf_Addr /*base*/,
                         const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                         char** debuginfo_file_name) {
  const DwApi& api = dw_api();
  std::string want;
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  const int len = api.dwfl_module_build_id(mod, &bits, &vaddr);
  if (len > 0) want = internal::to_hex(bits, static_cast<size_t>(len));

  struct stat self_st;
  const bool have_self = file_name != nullptr && ::stat(file_name, &self_st) == 0;

  enum class DebugFileCheck { kBuildIdOrCrc, kNone };
  auto try_path = [&](const std::string& p, DebugFileCheck check) -> int {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    if (have_self && st.st_dev == self_st.st_dev && st.st_ino == self_st.st_ino) return -1;
    ElfReader r;
    if (!r.open(p).ok()) return -1;
    if (check == DebugFileCheck::kBuildIdOrCrc) {
      if (!want.empty()) {
        base::StatusOr<std::string> got = r.build_id();
        if (!got.ok() || *got != want) return -1;
      } else {
        if (debuglink_crc == 0) return -1;
        base::StatusOr<uint32_t> crc = r.crc32();
        if (!crc.ok() || *crc != debuglink_crc) return -1;
      }
    }
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    *debuginfo_file_name = ::strdup(p.c_str());
    return fd;
  };

  static const char* const kDebugRoot = "/usr/lib/debug";
  if (want.size() > 2) {
    const int fd =
        try_path(std::string(kDebugRoot) + "/.build-id/" + want.substr(0, 2) + "/" + want.substr(2) + ".debug",
                 DebugFileCheck::kBuildIdOrCrc);
    if (fd >= 0) return fd;
  }
  if (debuglink_file != nullptr && debuglink_file[0] != '\0') {
    if (debuglink_file[0] == '/') {
      // Absolute name: the DWZ alternate file (.gnu_debugaltlink); it has its
      // own build-id, which libdw checks when it uses the file.
      return try_path(debuglink_file, DebugFileCheck::kNone);
    }
    std::string dir;
    if (file_name != nullptr) {
      const std::string f(file_name);
      const size_t slash = f.rfind('/');
      if (slash != std::string::npos) dir = f.substr(0, slash);
    }
    if (!dir.empty()) {
      for (const std::string& cand : {dir + "/" + debuglink_file, dir + "/.debug/" + debuglink_file,
                                      std::string(kDebugRoot) + dir + "/" + debuglink_file}) {
        const int fd = try_path(cand, DebugFileCheck::kBuildIdOrCrc);
        if (fd >= 0) return fd;
      }
    }
  }
  errno = 0;
  return -1;
}

// Offline modules are reported with their file: nothing to find.
int no_find_elf(Dwfl_Module*, void**, const char*, Dwarf_Addr, char**, Elf**) { return -1; }

struct Callbacks {
  Dwfl_Callbacks proc[2];     // [allow_debuginfod]
  Dwfl_Callbacks offline[2];  // [allow_debuginfod]
};

const Callbacks& callbacks() {
  static const Callbacks cbs = [] {
    const DwApi& api = dw_api();
    Callbacks c;
    std::memset(&c, 0, sizeof c);
    for (int d = 0; d < 2; ++d) {
      c.proc[d].find_elf = api.dwfl_linux_proc_find_elf;
      c.proc[d].find_debuginfo = d ? api.dwfl_standard_find_debuginfo : local_find_debuginfo;
      c.proc[d].section_address = nullptr;
      c.proc[d].debuginfo_path = nullptr;
      c.offline[d].find_elf = no_find_elf;
      c.offline[d].find_debuginfo = d ? api.dwfl_standard_find_debuginfo : local_find_debuginfo;
      c.offline[d].section_address = api.dwfl_offline_section_address;
      c.offline[d].debuginfo_path = nullptr;
    }
    return c;
  }();
  return cbs;
}

std::string dwfl_error(const DwApi& api) {
  const char* m = api.dwfl_errmsg(-1);
  return m ? m : "unknown libdwfl error";
}

std::string die_name(const DwApi& api, Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* n = api.dwarf_formstring(api.dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
  if (n == nullptr) n = api.dwarf_formstring(api.dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
  if (n != nullptr) return demangle(n);
  n = api.dwarf_diename(die);
  return n ? n : "";
}

std::string module_build_id(const DwApi& api, Dwfl_Module* mod) {
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  const int len = api.dwfl_module_build_id(mod, &bits, &vaddr);
  return len > 0 ? internal::to_hex(bits, static_cast<size_t>(len)) : std::string();
}

// Fills function / symbol_offset / file / line / inlined of `f` from `mod` at
// `addr` (an address in the Dwfl's address space). pc_delta = pc - lookup pc.
// Requires libdw_mutex().
void fill_from_dwfl_module(const DwApi& api, Dwfl_Module* mod, Dwarf_Addr addr, uint64_t pc_delta, bool resolve_inlines,
                           NativeFrame* f) {
  GElf_Off off = 0;
  GElf_Sym sym;
  std::memset(&sym, 0, sizeof sym);
  GElf_Word shndx = 0;
  Elf* elf = nullptr;
  Dwarf_Addr bias = 0;
  const char* name = api.dwfl_module_addrinfo(mod, addr, &off, &sym, &shndx, &elf, &bias);
  if (name != nullptr && name[0] != '\0') {
    f->function = demangle(name);
    f->symbol_offset = off + pc_delta;
  }

  std::string loc_file;
  int loc_line = 0;
  if (Dwfl_Line* line = api.dwfl_module_getsrc(mod, addr)) {
    Dwarf_Addr laddr = 0;
    int lineno = 0, col = 0;
    const char* src = api.dwfl_lineinfo(line, &laddr, &lineno, &col, nullptr, nullptr);
    if (src != nullptr) {
      loc_file = src;
      loc_line = lineno;
    }
  }

  std::string outer_name;
  if (resolve_inlines) {
    Dwarf_Addr cubias = 0;
    Dwarf_Die* cudie = api.dwfl_module_addrdie(mod, addr, &cubias);
    if (cudie != nullptr) {
      Dwarf_Die* scopes = nullptr;
      const int n = api.dwarf_getscopes(cudie, addr - cubias, &scopes);
      Dwarf_Files* files = nullptr;
      size_t nfiles = 0;
      const bool have_files = n > 0 && api.dwarf_getsrcfiles(cudie, &files, &nfiles) == 0;
      for (int i = 0; i < n; ++i) {
        Dwarf_Die* scope = &scopes[i];
        const int tag = api.dwarf_tag(scope);
        if (tag == DW_TAG_inlined_subroutine) {
          f->inlined.push_back(InlinedFrame{die_name(api, scope), loc_file, loc_line});
          // Continue outward from this call's call site.
          loc_file.clear();
          loc_line = 0;
          Dwarf_Attribute attr;
          Dwarf_Word v = 0;
          if (have_files && api.dwarf_formudata(api.dwarf_attr(scope, DW_AT_call_file, &attr), &v) == 0) {
            const char* fn = api.dwarf_filesrc(files, v, nullptr, nullptr);
            if (fn != nullptr) loc_file = fn;
          }
          if (api.dwarf_formudata(api.dwarf_attr(scope, DW_AT_call_line, &attr), &v) == 0)
            loc_line = static_cast<int>(v);
        } else if (tag == DW_TAG_subprogram || tag == DW_TAG_entry_point) {
          outer_name = die_name(api, scope);
          break;
        }
      }
      std::free(scopes);
    }
  }
  f->file = std::move(loc_file);
  f->line = loc_line;
  if (f->function.empty() && !outer_name.empty()) f->function = std::move(outer_name);
}

// The process's live Dwfl, one per debuginfod policy, with the module map it
// was reported for. Guarded by libdw_mutex().
struct LiveDwfl {
  Dwfl* dwfl = nullptr;
  std::vector<std::pair<std::string, uint64_t>> modules;  // (path, bias)
};
LiveDwfl g_live[2];

// Returns a Dwfl reporting the process's current mappings. It is kept (with
// the symbols/DWARF it loaded) while the set of loaded objects is unchanged,
// and rebuilt from scratch when it changed: re-reporting into an existing
// Dwfl (dwfl_report_begin + dwfl_linux_proc_report) is unreliable in libdwfl
// (modules whose range was refined from their ELF file are replaced by new
// ones that fail lookups with "address out of range").
// Requires libdw_mutex().
Dwfl* live_dwfl(const DwApi& api, bool allow_debuginfod, const std::vector<Module>& map) {
  LiveDwfl& live = g_live[allow_debuginfod ? 1 : 0];
  std::vector<std::pair<std::string, uint64_t>> sig;
  sig.reserve(map.size());
  for (const Module& m : map) sig.emplace_back(m.path, m.bias);
  if (live.dwfl != nullptr && sig == live.modules) return live.dwfl;
  if (live.dwfl != nullptr) api.dwfl_end(live.dwfl);
  live.modules.clear();
  live.dwfl = api.dwfl_begin(&callbacks().proc[allow_debuginfod ? 1 : 0]);
  if (live.dwfl == nullptr) return nullptr;
  api.dwfl_report_begin(live.dwfl);
  api.dwfl_linux_proc_report(live.dwfl, ::getpid());  // partial reports still usable
  api.dwfl_report_end(live.dwfl, nullptr, nullptr);
  live.modules = std::move(sig);
  return live.dwfl;
}

#endif  // CDSA_HAVE_LIBDWFL_H

}  // namespace

std::string NativeFrame::describe() const {
  std::string s = function.empty() ? std::string("??") : function;
  if (!function.empty() && file.empty() && symbol_offset != 0) s += "+" + hex_u64(symbol_offset);
  s += " (";
  if (!module.empty())
    s += basename_of(module) + "+" + hex_u64(module_offset);
  else
    s += hex_u64(pc);
  s += ')';
  append_location(&s, file, line);
  if (!inlined.empty()) {
    s += " [inlined:";
    for (size_t i = 0; i < inlined.size(); ++i) {
      s += i ? "; " : " ";
      s += inlined[i].function.empty() ? std::string("??") : inlined[i].function;
      append_location(&s, inlined[i].file, inlined[i].line);
    }
    s += ']';
  }
  if (!error.empty()) s += " [" + error + "]";
  return s;
}

std::string symbolizer_backend_description() { return dw_api().description; }

bool symbolizer_has_libdw() { return dw_api().ok; }

void set_libdw_choice(const char* path, bool disabled) { internal::choose_libdw(path, disabled); }

std::vector<NativeFrame> symbolize_live(const uintptr_t* pcs, size_t n, bool pcs_are_return_addresses,
                                        const SymbolizerOptions& options) {
  std::vector<NativeFrame> frames;
  if (pcs == nullptr || n == 0) return frames;
  frames.resize(n);
  const std::vector<Module> map = capture_module_map();
  std::vector<uintptr_t> lookups(n);
  std::vector<const Module*> mods(n);
  for (size_t i = 0; i < n; ++i) {
    NativeFrame& f = frames[i];
    f.pc = pcs[i];
    lookups[i] = (pcs_are_return_addresses && i > 0 && f.pc > 0) ? f.pc - 1 : f.pc;
    mods[i] = find_module(map, lookups[i]);
    if (mods[i] != nullptr) {
      f.module = mods[i]->path;
      f.module_offset = f.pc - mods[i]->bias;
    }
  }

#if CDSA_HAVE_LIBDWFL_H
  const DwApi& api = dw_api();
  if (options.use_libdw && api.ok) {
    std::lock_guard<std::mutex> lock(libdw_mutex());
    Dwfl* dwfl = live_dwfl(api, options.allow_debuginfod, map);
    for (size_t i = 0; dwfl != nullptr && i < n; ++i) {
      NativeFrame& f = frames[i];
      Dwfl_Module* mod = api.dwfl_addrmodule(dwfl, lookups[i]);
      if (mod == nullptr) continue;
      Dwarf_Addr elf_bias = 0;
      api.dwfl_module_getelf(mod, &elf_bias);  // loads the file: build-id known after
      if (mods[i] != nullptr) {
        // The file libdwfl opened must be the one that is mapped: a library
        // replaced on disk since it was loaded must not name these frames.
        const std::string on_disk = module_build_id(api, mod);
        if (on_disk != mods[i]->build_id) {
          f.error = on_disk.empty()
                        ? "module file on disk is gone or unreadable (loaded build-id " + mods[i]->build_id +
                              "): exported symbol only"
                        : "file on disk differs from the loaded module (build-id " + on_disk + " on disk, " +
                              (mods[i]->build_id.empty() ? std::string("none") : mods[i]->build_id) +
                              " loaded): exported symbol only";
          continue;
        }
      }
      fill_from_dwfl_module(api, mod, lookups[i], f.pc - lookups[i], options.resolve_inlines, &f);
    }
  }
#endif
  for (size_t i = 0; i < n; ++i)
    if (frames[i].function.empty()) fill_from_dladdr(lookups[i], frames[i].pc, &frames[i]);
  return frames;
}

// ---------------------------------------------------------------------------
// OfflineSymbolizer

struct OfflineSymbolizer::ModuleState {
  ModuleStatus status;
  bool usable = false;
#if CDSA_HAVE_LIBDWFL_H
  Dwfl* dwfl = nullptr;
#endif
  bool symbols_loaded = false;
  std::vector<ElfSymbol> symbols;  // fallback when libdw is not used
};

OfflineSymbolizer::OfflineSymbolizer(std::vector<Module> recorded_map, const SymbolizerOptions& options)
    : map_(std::move(recorded_map)), options_(options) {
  states_.resize(map_.size());
}

OfflineSymbolizer::~OfflineSymbolizer() {
#if CDSA_HAVE_LIBDWFL_H
  const DwApi& api = dw_api();
  std::lock_guard<std::mutex> lock(libdw_mutex());
  for (auto& st : states_)
    if (st && st->dwfl != nullptr) api.dwfl_end(st->dwfl);
#endif
}

OfflineSymbolizer::ModuleState* OfflineSymbolizer::state_for(size_t index) {
  if (states_[index]) return states_[index].get();
  states_[index] = std::make_unique<ModuleState>();
  ModuleState* st = states_[index].get();
  const Module& m = map_[index];
  ModuleStatus& s = st->status;
  s.path = m.path;
  s.recorded_build_id = m.build_id;

  struct stat sb;
  if (::stat(m.path.c_str(), &sb) != 0) {
    s.state = ModuleStatus::State::kMissing;
    s.message = "cannot open " + m.path + ": " + std::strerror(errno);
    return st;
  }
  ElfReader reader;
  if (base::Status opened = reader.open(m.path); !opened.ok()) {
    s.state = ModuleStatus::State::kUnreadable;
    s.message = "cannot use " + m.path + ": " + opened.message();
    return st;
  }
  base::StatusOr<std::string> id = reader.build_id();
  if (!id.ok()) {
    s.state = ModuleStatus::State::kUnreadable;
    s.message = "cannot read build-id of " + m.path + ": " + id.status().message();
    return st;
  }
  s.file_build_id = std::move(*id);
  if (s.file_build_id != m.build_id) {
    s.state = ModuleStatus::State::kMismatch;
    s.message = "binary changed since the run: build-id " +
                (s.file_build_id.empty() ? std::string("none") : s.file_build_id) + ", recorded " +
                (m.build_id.empty() ? std::string("none") : m.build_id) + " (" + m.path + ")";
    return st;
  }
  if (m.build_id.empty()) {
    s.state = ModuleStatus::State::kUnverified;
    s.message = "no build-id recorded nor in " + m.path + ": file not verified";
  } else {
    s.state = ModuleStatus::State::kOk;
  }
  st->usable = true;

#if CDSA_HAVE_LIBDWFL_H
  const DwApi& api = dw_api();
  if (options_.use_libdw && api.ok) {
    std::lock_guard<std::mutex> lock(libdw_mutex());
    const int d = options_.allow_debuginfod ? 1 : 0;
    Dwfl* dwfl = api.dwfl_begin(&callbacks().offline[d]);
    if (dwfl != nullptr) {
      api.dwfl_report_begin(dwfl);
      // Base 0: Dwfl addresses are the file's own virtual addresses, i.e.
      // (pc - recorded bias) for both ET_DYN and ET_EXEC.
      Dwfl_Module* mod = api.dwfl_report_elf(dwfl, basename_of(m.path).c_str(), m.path.c_str(), -1, 0, true);
      const std::string report_err = mod ? std::string() : dwfl_error(api);
      api.dwfl_report_end(dwfl, nullptr, nullptr);
      if (mod != nullptr) {
        // Re-check what libdw actually opened (the file could change between
        // our check and its open).
        if (module_build_id(api, mod) != s.file_build_id) {
          api.dwfl_end(dwfl);
          st->usable = false;
          s.state = ModuleStatus::State::kMismatch;
          s.message = "binary changed while reading it (" + m.path + ")";
          return st;
        }
        st->dwfl = dwfl;
      } else {
        api.dwfl_end(dwfl);
        if (!s.message.empty()) s.message += "; ";
        s.message += "libdw cannot use " + m.path + ": " + report_err + "; using the ELF symbol table";
      }
    }
  }
#endif
  return st;
}

NativeFrame OfflineSymbolizer::symbolize_locked(uintptr_t pc, bool is_return_address) {
  NativeFrame f;
  f.pc = pc;
  const uintptr_t lookup = (is_return_address && pc > 0) ? pc - 1 : pc;
  const Module* m = find_module(map_, lookup);
  if (m == nullptr) {
    f.error = "pc not in any recorded module";
    return f;
  }
  f.module = m->path;
  f.module_offset = pc - m->bias;
  ModuleState* st = state_for(static_cast<size_t>(m - map_.data()));
  if (!st->usable) {
    f.error = st->status.message;
    return f;
  }
  const uint64_t addr = lookup - m->bias;
#if CDSA_HAVE_LIBDWFL_H
  if (st->dwfl != nullptr) {
    const DwApi& api = dw_api();
    std::lock_guard<std::mutex> lock(libdw_mutex());
    if (Dwfl_Module* mod = api.dwfl_addrmodule(st->dwfl, addr))
      fill_from_dwfl_module(api, mod, addr, pc - lookup, options_.resolve_inlines, &f);
    return f;
  }
#endif
  if (!st->symbols_loaded) {
    st->symbols_loaded = true;
    ElfReader reader;
    base::Status opened = reader.open(m->path);
    base::StatusOr<std::vector<ElfSymbol>> symbols = opened.ok() ? reader.function_symbols() : opened;
    if (symbols.ok()) {
      st->symbols = std::move(*symbols);
    } else {
      st->symbols.clear();
      if (st->status.message.empty()) st->status.message = "cannot read symbols: " + symbols.status().message();
    }
  }
  if (const ElfSymbol* sym = lookup_symbol(st->symbols, addr)) {
    f.function = demangle(sym->name.c_str());
    f.symbol_offset = addr - sym->value + (pc - lookup);
  }
  return f;
}

NativeFrame OfflineSymbolizer::symbolize_pc(uintptr_t pc, bool is_return_address) {
  std::lock_guard<std::mutex> lock(mu_);
  return symbolize_locked(pc, is_return_address);
}

std::vector<NativeFrame> OfflineSymbolizer::symbolize(const uintptr_t* pcs, size_t n, bool pcs_are_return_addresses) {
  std::vector<NativeFrame> frames;
  if (pcs == nullptr) return frames;
  frames.reserve(n);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) frames.push_back(symbolize_locked(pcs[i], pcs_are_return_addresses && i > 0));
  return frames;
}

std::vector<ModuleStatus> OfflineSymbolizer::module_statuses() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModuleStatus> out;
  for (const auto& st : states_)
    if (st) out.push_back(st->status);
  return out;
}

}  // namespace cdsa::symbolizer
