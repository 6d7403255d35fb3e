// cdsa symbolizer: native PC -> function / module+offset / file:line.
//
// Contract:
//  - Allocates; does file I/O. Call from the fault-report path (live) or from
//    the CLI (offline). NEVER call on the kernel-launch hot path: record raw
//    PCs there (unw_backtrace) and symbolize later.
//  - Thread-safe: symbolize_live() may be called from any thread (libdw work
//    is serialized by an internal mutex, so concurrent reports queue). An
//    OfflineSymbolizer may be shared between threads (internally locked).
//    symbolizer_backend_description() and demangle() are thread-safe.
//    Not async-signal-safe (locks, malloc, file I/O): do not call from a
//    signal handler.
//  - Never throws (no exceptions are used; safe with -fno-exceptions) and
//    never crashes or hangs on missing, stripped, replaced, truncated or
//    non-ELF files: such cases yield frames with empty function/file and a
//    per-frame `error` string.
//  - libdw (elfutils) is loaded at run time with dlopen("libdw.so.1") on first
//    use, never linked. Without it: live frames come from dladdr() (exported
//    .dynsym symbols only, no file:line), offline frames from the ELF symbol
//    table read by cdsa's own reader (no file:line).
//    symbolizer_backend_description() says which applies, in one line.
//  - Debug info: DWARF/.symtab are read from the module file itself, else from
//    separate debug files found locally (/usr/lib/debug/.build-id/xx/yyyy.debug,
//    .gnu_debuglink next to the file, in .debug/ or under /usr/lib/debug),
//    each verified against the module's build-id (or debuglink CRC).
//    debuginfod is never contacted unless SymbolizerOptions::allow_debuginfod.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "symbolizer/demangle.h"
#include "symbolizer/module_map.h"

namespace cdsa::symbolizer {

struct SymbolizerOptions {
  // false: do not use libdw even if it is available (the dladdr / ELF-symtab
  // fallback). set_libdw_choice(path, true) forces this process-wide.
  bool use_libdw = true;
  // Resolve inlined frames from DWARF (NativeFrame::inlined).
  bool resolve_inlines = true;
  // Allow libdwfl to ask debuginfod servers (DEBUGINFOD_URLS) for missing
  // debug info. Network access and possibly long timeouts: keep false in the
  // fault-report path; the CLI may enable it.
  bool allow_debuginfod = false;
};

// A function inlined at a PC.
struct InlinedFrame {
  std::string function;  // demangled; "" if unknown
  std::string file;      // source file as recorded in DWARF; "" if unknown
  int line = 0;          // 0 if unknown
};

// One symbolized native frame.
struct NativeFrame {
  uintptr_t pc = 0;  // the PC as given (not adjusted)
  // Path of the module containing the PC ("" if none). Same convention as
  // Module::path.
  std::string module;
  // pc - module load bias: the address `addr2line -e <module>` takes. For
  // return addresses the lookup itself used module_offset - 1 (see
  // symbolize_live), but the value reported here is that of `pc`.
  uint64_t module_offset = 0;
  // The function physically containing the PC (the symbol, i.e. the
  // out-of-line function), demangled; "" if unknown.
  std::string function;
  uint64_t symbol_offset = 0;  // pc - start of `function` (when known)
  // Source position in `function`: if code was inlined at this PC, this is
  // the call site of the outermost inlined call; otherwise the line-table
  // position of the PC. file "" / line 0 when unknown.
  std::string file;
  int line = 0;
  // Functions inlined into `function` at this PC, innermost first.
  // inlined[0] is the code actually at the PC (its file:line is the
  // line-table position), inlined[i] (i>0) called inlined[i-1] at
  // inlined[i].file:line. The full logical stack, innermost first, is
  // inlined[0..k-1] followed by {function, file, line}.
  std::vector<InlinedFrame> inlined;
  // Per-frame diagnostic, "" when none. E.g. "binary changed since the run:
  // build-id X, recorded Y (path)", "cannot open path: No such file or
  // directory", "pc not in any recorded module". When set for a module
  // problem, no symbol is guessed (function/file empty).
  std::string error;

  // One line, e.g.
  //   at::native::foo(int) (libtorch_cuda.so+0x1a2b3c) at Loss.cu:250
  //   ?? (libfoo.so+0x1234) [binary changed since the run: build-id .., recorded ..]
  //   inner(int) ... are appended as " [inlined: f at a.h:3; g at b.h:7]".
  // Module and source file are shown by basename.
  std::string describe() const;
};

// One line describing the active backend, e.g. "libdw 0.188 (dlopen
// libdw.so.1): .symtab/DWARF symbols, file:line, inlined frames" or
// "libdw unavailable (dlopen libdw.so.1: ...): live frames use dladdr ...".
// Print it once per report.
std::string symbolizer_backend_description();

// True when libdw was loaded and is used (unless an option disables it).
bool symbolizer_has_libdw();

// Which libdw the process loads: `path` ("" or null: the copy bundled beside cdsa, else the system's libdw.so.1;
// the caller keeps it alive for the process), or none when `disabled`. The configuration's CDSA_LIBDW_PATH and
// CDSA_SYMBOLIZER_NO_LIBDW (shim/common/config_vars.def): libcdsa.so's constructor and the CLI's main() set it once,
// before anything symbolizes; a call after libdw was first looked for changes nothing.
void set_libdw_choice(const char* path, bool disabled);

// Symbolizes PCs of the running process (captures a fresh module map).
// pcs_are_return_addresses: the PCs come from a stack walk (unw_backtrace,
// backtrace()): every frame except the first (index 0) is then looked up at
// pc - 1 so that the call instruction, not the following one, is attributed.
// Pass false for exact PCs (e.g. a PC taken from a signal context or a label).
// Frames whose module file changed on disk since it was loaded (build-id
// differs) are named from memory via dladdr only, with `error` set.
std::vector<NativeFrame> symbolize_live(const uintptr_t* pcs, size_t n,
                                        bool pcs_are_return_addresses,
                                        const SymbolizerOptions& options = {});

// Per-module state of an OfflineSymbolizer.
struct ModuleStatus {
  enum class State {
    kOk,          // file found, build-id matches
    kUnverified,  // usable, but no build-id recorded nor on disk: not verified
    kMismatch,    // build-id differs: not symbolized
    kMissing,     // cannot open the file
    kUnreadable,  // not ELF / truncated / malformed
  };
  std::string path;
  std::string recorded_build_id;
  std::string file_build_id;  // "" if unknown / none
  State state = State::kMissing;
  std::string message;  // human-readable; "" for kOk
};

// Symbolizes PCs recorded in another (possibly dead) process, using a
// recorded module map and the files now on disk at the recorded paths.
// Each module's file is opened lazily, at most once, and its build-id is
// checked against the recorded one; a mismatch or unreadable file is
// reported on each affected frame (NativeFrame::error) and in
// module_statuses(), and no symbol is guessed for it. Per-module libdw state
// (symbols, DWARF) is cached for the lifetime of the object.
class OfflineSymbolizer {
 public:
  explicit OfflineSymbolizer(std::vector<Module> recorded_map,
                             const SymbolizerOptions& options = {});
  ~OfflineSymbolizer();
  OfflineSymbolizer(const OfflineSymbolizer&) = delete;
  OfflineSymbolizer& operator=(const OfflineSymbolizer&) = delete;

  // Same output and pcs_are_return_addresses rule as symbolize_live().
  std::vector<NativeFrame> symbolize(const uintptr_t* pcs, size_t n,
                                     bool pcs_are_return_addresses);
  // One PC; `is_return_address` selects the pc - 1 lookup.
  NativeFrame symbolize_pc(uintptr_t pc, bool is_return_address);

  // Status of every module opened so far (in recorded-map order).
  std::vector<ModuleStatus> module_statuses();

  const std::vector<Module>& module_map() const { return map_; }

 private:
  struct ModuleState;
  ModuleState* state_for(size_t index);  // requires mu_
  NativeFrame symbolize_locked(uintptr_t pc, bool is_return_address);

  std::vector<Module> map_;
  SymbolizerOptions options_;
  std::vector<std::unique_ptr<ModuleState>> states_;  // parallel to map_
  std::mutex mu_;
};

}  // namespace cdsa::symbolizer
