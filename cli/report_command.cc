// cdsa report FILE [--json] [--no-resymbolize] [--native-all]: the live report again, from the file alone.
#include <fmt/format.h>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "base/path.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/trace_common.h"
#include "report/frames.h"
#include "symbolizer/native_symbolizer.h"

namespace cdsa::cli {
namespace {

// Every native frame the report shows, each stack once: the entries of `stacks` the report names by id (not the
// other launches' stacks), and a stack of the report that has no id.
void for_each_native(report::TraceData& t, const std::function<void(report::ResolvedFrame&)>& fn) {
  std::set<uint32_t> ids;
  auto note = [&](uint32_t id, report::CallStack& st) {
    if (id != 0xffffffffu)
      ids.insert(id);
    else
      for (auto& f : st.native) fn(f);
  };
  report::for_each_report_stack(t.report, note);
  for (auto& e : t.stacks)
    if (ids.count(e.id))
      for (auto& f : e.stack.native) fn(f);
}

// Re-symbolizes the trace's native frames from the files now on disk, checked against the recorded
// build-ids, once per stack; the report's stacks are then taken from them again. The names recorded at the fault
// were resolved in the live process against the right binaries, so they stay; the offline pass fills in what the
// live pass could not find (e.g. no libdw in the process). A module that changed or vanished since the run is
// named in a note.
void resymbolize(report::TraceData& t) {
  std::vector<symbolizer::Module> map;
  for (const auto& m : t.modules) map.push_back(report::module_from_record(m));
  symbolizer::OfflineSymbolizer sym(std::move(map));
  std::set<std::string> module_paths;
  for_each_native(t, [&](report::ResolvedFrame& f) { module_paths.insert(f.module); });
  std::set<std::string> done_modules;
  Progress progress("symbolizing modules", module_paths.size());
  std::map<std::string, std::string> problems;  // module path -> what is wrong with it now
  for_each_native(t, [&](report::ResolvedFrame& f) {
    // Shown before the work: the first frame of a big library is the slow one (libdw reads its DWARF).
    if (done_modules.insert(f.module).second) progress.step(done_modules.size());
    symbolizer::NativeFrame o = sym.symbolize_pc(f.pc, /*is_return_address=*/true);
    if (!o.error.empty()) {
      // (Objects that are not files, such as linux-vdso.so.1, cannot be re-read: nothing to say about them.)
      if (!o.module.empty() && o.module[0] == '/') problems.emplace(o.module, o.error);
      return;
    }
    // The live report's rule (report/frames.h); names recorded at the fault stay, gaps are filled.
    report::ResolvedFrame now = report::resolved_frame(f.pc, o);
    if (f.function.empty()) f.function = now.function;
    if (f.file.empty() && !now.file.empty()) {
      f.file = now.file;
      f.line = now.line;
    }
    if (f.module.empty()) {
      f.module = now.module;
      f.module_offset = now.module_offset;
    }
  });
  progress.finish();
  report::fill_report_stacks(&t);
  for (const auto& [path, what] : problems)
    t.report.notes.push_back(fmt::format("{}: {}; its frames show the names recorded at the time of the fault",
                                         base::basename_of(path), what));
}

}  // namespace

int cmd_report(int argc, char** argv) {
  bool as_json = false, resym = true, native_all = false;
  std::string path;
  CommandLine cl{"report",
                 "usage: cdsa report FILE [--json] [--no-resymbolize] [--native-all]\n"
                 "Prints the report the live process printed, from the trace file alone. Native frames are\n"
                 "checked against the recorded build-ids and re-symbolized offline where the run lacked names.\n"
                 "--native-all shows every native frame (interpreter and call-machinery frames are folded\n"
                 "unless the run had CDSA_NATIVE_ALL=1).\n"
                 "--json prints the report object instead, its stacks in place (null when the run had no fault).\n",
                 {{"--json", false, store(as_json, true)},
                  {"--no-resymbolize", false, store(resym, false)},
                  {"--native-all", false, store(native_all, true)}},
                 [&](const char* a) {
                   if (path.empty()) {
                     path = a;
                     return kGoOn;
                   }
                   fprintf(stderr, "cdsa report: one trace file at a time (got %s and %s)\n", path.c_str(), a);
                   return 2;
                 }};
  report::TraceFile tf;
  if (int rc = parse_and_load(cl, argc, argv, path, Needs::Trace, &tf); rc != kGoOn) return rc;
  report::TraceData& t = tf.data;
  if (!t.has_fault) {
    if (as_json) return print_stdout("null\n") ? 0 : 1;
    std::string out = fmt::format("cdsa: {}: no fault in this run (trace written at {}); {} launch record{} kept", path,
                                  t.reason, t.launches.size(), t.launches.size() == 1 ? "" : "s");
    if (t.has_profile)
      out += fmt::format(", launch-site profile of {} sites (cdsa top / cdsa flame)", t.profile.sites.size());
    out += "\n";
    return print_stdout(out) ? 0 : 1;
  }
  report::FaultReport& r = t.report;
  if (resym) resymbolize(t);
  r.trace_path = path;
  report::TextOptions opt;
  // The live report's view: folded unless the run asked for every frame.
  for (const auto& [key, value] : t.cdsa.config)
    if (key == "native_all" && value == "1") opt.native_all = true;
  if (native_all) opt.native_all = true;
  std::string out = as_json ? report::report_to_json(r) + "\n" : report::format_report_text(r, opt);
  return print_stdout(out) ? 0 : 1;
}

}  // namespace cdsa::cli
