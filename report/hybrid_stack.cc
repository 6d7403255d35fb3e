#include "report/hybrid_stack.h"

#include <cstring>

#include "base/path.h"

namespace cdsa::report {
namespace {

using base::basename_of;

bool starts_with(const std::string& s, const char* prefix) { return s.compare(0, strlen(prefix), prefix) == 0; }
bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The name without a trailing argument list, a symbol version (@@GLIBC_2.34) or a GCC clone
// suffix (.cold, .constprop.0, .isra.0).
std::string bare_name(const std::string& fn) {
  std::string s = fn.substr(0, fn.find('('));
  s = s.substr(0, s.find('@'));
  auto dot = s.find('.');
  return dot == std::string::npos ? s : s.substr(0, dot);
}

bool is_eval_name(const std::string& fn) {
  std::string n = bare_name(fn);
  return n == "_PyEval_EvalFrameDefault" || n == "PyEval_EvalFrameEx";
}

// The outermost frame of a process or a thread: a stack ending there was not cut by the depth limit.
bool is_start_name(const std::string& fn) {
  std::string n = bare_name(fn);
  for (const char* e : {"_start", "__libc_start_main", "__libc_start_main_impl", "__libc_start_call_main",
                        "start_thread", "clone", "clone3", "__clone", "__clone3"})
    if (n == e) return true;
  return false;
}

bool is_machinery_name(const std::string& fn) {
  if (fn.empty()) return false;
  std::string n = bare_name(fn);
  static const char* const kExact[] = {"_start",
                                       "__libc_start_main",
                                       "__libc_start_main_impl",
                                       "__libc_start_call_main",
                                       "start_thread",
                                       "clone",
                                       "clone3",
                                       "__clone",
                                       "__clone3",
                                       "cfunction_call",
                                       "Py_RunMain",
                                       "Py_BytesMain",
                                       "Py_Main",
                                       "run_mod",
                                       "run_eval_code_obj",
                                       "_ctypes_callproc",
                                       "PyCFuncPtr_call",
                                       "builtin_exec"};
  for (const char* e : kExact)
    if (n == e) return true;
  static const char* const kPrefix[] = {"_PyEval_",
                                        "PyEval_",
                                        "PyObject_Call",
                                        "PyObject_Vectorcall",
                                        "_PyFunction_",
                                        "slot_tp_",
                                        "pymain_",
                                        "_PyRun_",
                                        "PyRun_",
                                        "pyrun_",
                                        "ffi_call",
                                        "cfunction_vectorcall",
                                        "method_vectorcall",
                                        "_PyVectorcall_",
                                        "PyVectorcall_"};
  for (const char* p : kPrefix)
    if (starts_with(n, p)) return true;
  if (contains(n, "Vectorcall") || contains(n, "vectorcall")) return true;
  if (starts_with(n, "_PyObject_") && contains(n, "Call")) return true;
  return false;
}

}  // namespace

bool in_interpreter_module(const ResolvedFrame& f) {
  std::string b = basename_of(f.module);
  // python3, python3.11, python3.12d, libpython3.11.so.1.0 (not python extension modules: those
  // are "name.cpython-311-....so", which neither prefix matches).
  return starts_with(b, "libpython") || (starts_with(b, "python") && b.find(".so") == std::string::npos);
}

FrameRole native_frame_role(const ResolvedFrame& f) {
  std::string b = basename_of(f.module);
  if (starts_with(b, "libcdsa")) return FrameRole::Cdsa;
  if (is_eval_name(f.function)) return FrameRole::Eval;
  if (in_interpreter_module(f) || starts_with(b, "libffi") || starts_with(b, "_ctypes") ||
      is_machinery_name(f.function))
    return FrameRole::Machinery;
  return FrameRole::Shown;
}

namespace {

// Rule 6: the entries before the outermost notebook cell's frame go.
void fold_before_cell(HybridStack& h, bool native_all) {
  if (native_all) return;
  for (size_t i = 0; i < h.entries.size(); ++i) {
    const PyFrame* p = h.entries[i].python;
    if (!p || p->file.rfind("Cell In[", 0) != 0) continue;
    if (i == 0) return;
    size_t folded_native = 0;
    for (size_t k = 0; k < i; ++k) folded_native += h.entries[k].native != nullptr;
    size_t folded_python = i - folded_native;
    h.entries.erase(h.entries.begin(), h.entries.begin() + static_cast<std::ptrdiff_t>(i));
    h.folded_kernel = i;
    if (!h.merged) h.python_count -= folded_python;
    return;
  }
}

}  // namespace

HybridStack build_hybrid_stack(const CallStack& st, bool native_all) {
  HybridStack h = build_hybrid_stack_unfolded(st, native_all);
  fold_before_cell(h, native_all);
  return h;
}

HybridStack build_hybrid_stack_unfolded(const CallStack& st, bool native_all) {
  HybridStack h;
  // Native frames without cdsa's own, innermost first, with their roles.
  std::vector<const ResolvedFrame*> nat;
  std::vector<FrameRole> role;
  for (const auto& f : st.native) {
    FrameRole r = native_frame_role(f);
    if (r == FrameRole::Cdsa) continue;
    nat.push_back(&f);
    role.push_back(r);
  }
  const size_t P = st.python.size();
  // Rule 5: without Python frames nothing stands for the interpreter's frames: all are shown, as recorded.
  auto visible = [&](size_t i) { return native_all || P == 0 || role[i] == FrameRole::Shown; };

  // Anchors (rule 2), innermost first: [first, last] native indexes of each.
  struct Anchor {
    size_t first, last;
  };
  std::vector<Anchor> anchors;
  bool named = false;
  for (size_t i = 0; i < nat.size(); ++i)
    if (role[i] == FrameRole::Eval) anchors.push_back({i, i});
  named = !anchors.empty();
  if (!named) {
    for (size_t i = 0; i < nat.size(); ++i) {
      if (!in_interpreter_module(*nat[i])) continue;
      if (!anchors.empty() && anchors.back().last + 1 == i)
        anchors.back().last = i;
      else
        anchors.push_back({i, i});
    }
  }

  // Every Python frame (outermost first), then every visible native frame (outermost first).
  auto python_then_native = [&] {
    for (auto it = st.python.rbegin(); it != st.python.rend(); ++it) h.entries.push_back({&*it, nullptr});
    for (size_t i = nat.size(); i-- > 0;) {
      if (visible(i))
        h.entries.push_back({nullptr, nat[i]});
      else
        ++h.folded;
    }
  };

  // Rule 3: can the Python frames be placed?
  const size_t A = anchors.size();
  if (A == 0 && P > 0 && !nat.empty() && !is_start_name(nat.back()->function) && !in_interpreter_module(*nat.back())) {
    // Rule 3a: the native stack was cut before it reached any interpreter frame, so every frame it holds ran
    // below the innermost Python frame.
    h.merged = true;
    python_then_native();
    return h;
  }
  bool pairs = P > 0 && A >= 1 && A <= P;
  if (pairs && !(named && A == P) && A > 1) {
    if (native_all) pairs = false;
    for (size_t i = anchors.front().last + 1; pairs && i < anchors.back().first; ++i)
      if (role[i] == FrameRole::Shown) pairs = false;
  }

  if (!pairs) {
    // Rule 5: two lists (or the native list alone).
    h.python_count = P;
    python_then_native();
    return h;
  }

  // How many Python frames each anchor runs (innermost anchor first).
  std::vector<size_t> share(A, 1);
  share[0] = P - (A - 1);
  h.merged = true;
  // Walk from the outermost frame inwards, emitting "most recent call last".
  size_t py_next = P;  // Python frames still to place: st.python[0 .. py_next)
  size_t a = A;        // anchors not yet reached from the outside: anchors[0 .. a)
  for (size_t i = nat.size(); i-- > 0;) {
    if (a > 0 && i == anchors[a - 1].last) {
      // Entering anchor a-1 from outside: its native frames are the interpreter, shown as its Python frames.
      const Anchor& an = anchors[a - 1];
      for (size_t k = an.last + 1; k-- > an.first;) {
        if (native_all)
          h.entries.push_back({nullptr, nat[k]});
        else
          ++h.folded;
      }
      size_t take = share[a - 1];
      for (size_t k = 0; k < take; ++k) h.entries.push_back({&st.python[--py_next], nullptr});
      i = an.first;  // the loop's i-- moves past the anchor
      --a;
      continue;
    }
    if (visible(i))
      h.entries.push_back({nullptr, nat[i]});
    else
      ++h.folded;
  }
  return h;
}

}  // namespace cdsa::report
