#include "shim/fault/python_bridge.h"

#include <dlfcn.h>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "shim/common/driver.h"
#include "shim/common/log.h"
#include "shim/fault/python_hook_source.h"  // generated from python/cdsa/_hook.py: kPythonHookSource

namespace cdsa {
namespace {

// CPython's C API as far as this file uses it, every function resolved with dlsym (no libpython dependency). All
// of these exist, with these signatures, in CPython 3.8 through 3.14.
using PyObj = void*;
struct MethodDef {  // PyMethodDef
  const char* name;
  PyObj (*meth)(PyObj, PyObj);
  int flags;
  const char* doc;
};
constexpr int kMethVarargs = 1;  // METH_VARARGS
constexpr int kFileInput = 257;  // Py_file_input

struct Api {
  int (*IsInitialized)() = nullptr;
  int (*AddPendingCall)(int (*)(void*), void*) = nullptr;
  PyObj (*ImportAddModule)(const char*) = nullptr;
  PyObj (*ModuleGetDict)(PyObj) = nullptr;
  PyObj (*EvalGetBuiltins)() = nullptr;
  int (*DictSetItemString)(PyObj, const char*, PyObj) = nullptr;
  PyObj (*RunStringFlags)(const char*, int, PyObj, PyObj, void*) = nullptr;
  PyObj (*GetAttrString)(PyObj, const char*) = nullptr;
  PyObj (*CallObject)(PyObj, PyObj) = nullptr;
  PyObj (*BuildValue)(const char*, ...) = nullptr;
  PyObj (*CFunctionNewEx)(MethodDef*, PyObj, PyObj) = nullptr;
  int (*IsTrue)(PyObj) = nullptr;
  void (*IncRef)(PyObj) = nullptr;
  void (*DecRef)(PyObj) = nullptr;
  void (*ErrClear)() = nullptr;
  void (*ErrFetch)(PyObj*, PyObj*, PyObj*) = nullptr;
  void (*ErrRestore)(PyObj, PyObj, PyObj) = nullptr;
  int (*AddAuditHook)(int (*)(const char*, PyObj, void*), void*) = nullptr;
  int (*ArgParseTuple)(PyObj, const char*, ...) = nullptr;
  PyObj (*TupleGetItem)(PyObj, long) = nullptr;
};
Api g_py;

bool resolve_api() {
  DlsymFn sym = real_dlsym();
  bool ok = true;
  auto get = [&](auto& slot, const char* name) {
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(sym(RTLD_DEFAULT, name));
    ok = ok && slot != nullptr;
  };
  get(g_py.IsInitialized, "Py_IsInitialized");
  get(g_py.AddPendingCall, "Py_AddPendingCall");
  get(g_py.ImportAddModule, "PyImport_AddModule");
  get(g_py.ModuleGetDict, "PyModule_GetDict");
  get(g_py.EvalGetBuiltins, "PyEval_GetBuiltins");
  get(g_py.DictSetItemString, "PyDict_SetItemString");
  get(g_py.RunStringFlags, "PyRun_StringFlags");
  get(g_py.GetAttrString, "PyObject_GetAttrString");
  get(g_py.CallObject, "PyObject_CallObject");
  get(g_py.BuildValue, "Py_BuildValue");
  get(g_py.CFunctionNewEx, "PyCFunction_NewEx");
  get(g_py.IsTrue, "PyObject_IsTrue");
  get(g_py.IncRef, "Py_IncRef");
  get(g_py.DecRef, "Py_DecRef");
  get(g_py.ErrClear, "PyErr_Clear");
  get(g_py.ErrFetch, "PyErr_Fetch");
  get(g_py.ErrRestore, "PyErr_Restore");
  get(g_py.AddAuditHook, "PySys_AddAuditHook");
  get(g_py.ArgParseTuple, "PyArg_ParseTuple");
  get(g_py.TupleGetItem, "PyTuple_GetItem");
  return ok;
}

enum State : int { kNone = 0, kScheduled = 1, kStarted = 2, kFailed = 3 };
std::atomic<int> g_state{kNone};
std::atomic<bool> g_kernel{false};  // the module runs in a Jupyter kernel: it prints the report
PyObj g_module = nullptr;           // _cdsa_hook (GIL-protected)

// The reported fault, written once before g_fault_ready is set; read after.
std::string g_json, g_text, g_note, g_prior_note, g_pointer;
bool g_text_for_python = false;
std::atomic<bool> g_fault_ready{false};
std::atomic<bool> g_delivered{false};
std::atomic<bool> g_text_printed{false};

std::mutex g_sources_mutex;
std::map<std::string, std::pair<std::string, std::string>> g_sources;  // file -> (display name, text)
constexpr size_t kMaxSources = 65536;

// Runs `fn` with the caller's exception (if any) put aside and restored, and any exception it leaves cleared: the
// program never sees an error of cdsa's. GIL held.
template <typename Fn>
void isolated(Fn fn) {
  PyObj t = nullptr, v = nullptr, tb = nullptr;
  g_py.ErrFetch(&t, &v, &tb);
  fn();
  g_py.ErrClear();
  g_py.ErrRestore(t, v, tb);
}

// Calls module.NAME(args...) built from `format`; returns the result (new reference) or null.
template <typename... A>
PyObj call_module(const char* name, const char* format, A... a) {
  if (!g_module) return nullptr;
  PyObj fn = g_py.GetAttrString(g_module, name);
  if (!fn) return nullptr;
  PyObj args = g_py.BuildValue(format, a...);
  PyObj res = args ? g_py.CallObject(fn, args) : nullptr;
  if (args) g_py.DecRef(args);
  g_py.DecRef(fn);
  return res;
}

void deliver_fault();

PyObj py_register_source(PyObj, PyObj args) {
  const char* file = nullptr;
  const char* display = nullptr;
  const char* text = nullptr;
  if (!g_py.ArgParseTuple(args, "sss", &file, &display, &text)) return nullptr;
  {
    std::lock_guard<std::mutex> lock(g_sources_mutex);
    if (g_sources.size() < kMaxSources || g_sources.count(file)) g_sources[file] = {display, text};
  }
  return g_py.BuildValue("");
}

PyObj py_deliver(PyObj, PyObj) {
  deliver_fault();
  return g_py.BuildValue("");
}

MethodDef g_register_def{"register_source", py_register_source, kMethVarargs,
                         "register_source(filename, display_name, text): a notebook cell for cdsa's report"};
MethodDef g_deliver_def{"deliver", py_deliver, kMethVarargs, "deliver(): hand a reported fault to _cdsa_hook now"};

int audit_hook(const char* event, PyObj args, void*);

// GIL held, main thread (a pending call). Runs the embedded module and its _start once.
void start_module() {
  int expected = kScheduled;
  if (!g_state.compare_exchange_strong(expected, kFailed)) return;  // kFailed until it has worked
  bool kernel = false;
  bool ok = false;
  isolated([&] {
    PyObj m = g_py.ImportAddModule("_cdsa_hook");
    if (!m) return;
    PyObj d = g_py.ModuleGetDict(m);
    if (!d || g_py.DictSetItemString(d, "__builtins__", g_py.EvalGetBuiltins()) != 0) return;
    PyObj r = g_py.RunStringFlags(kPythonHookSource, kFileInput, d, d, nullptr);
    if (!r) return;
    g_py.DecRef(r);
    g_py.IncRef(m);
    g_module = m;
    PyObj reg = g_py.CFunctionNewEx(&g_register_def, nullptr, nullptr);
    PyObj del = g_py.CFunctionNewEx(&g_deliver_def, nullptr, nullptr);
    if (!reg || !del) return;
    PyObj res = call_module("_start", "(OO)", reg, del);
    g_py.DecRef(reg);
    g_py.DecRef(del);
    if (!res) return;
    kernel = g_py.IsTrue(res) == 1;
    g_py.DecRef(res);
    // An uncaught exception is printed by the interpreter without running Python code first (so no pending call
    // runs before it): the "sys.excepthook" audit event is the last moment to add the note. Adding the hook raises
    // "sys.addaudithook" to the hooks already there; a hook that refuses leaves only this path out.
    g_py.AddAuditHook(audit_hook, nullptr);
    ok = true;
  });
  if (!ok) {
    CDSA_NOTICE_ONCE("the Python side (traceback note, notebook cells) could not start; the report is unaffected");
    return;
  }
  g_kernel.store(kernel, std::memory_order_release);
  g_state.store(kStarted, std::memory_order_release);
}

int start_pending(void*) {
  start_module();
  if (g_fault_ready.load(std::memory_order_acquire)) deliver_fault();
  return 0;  // never an error: the program's code resumes as it was
}

// GIL held. Hands the reported fault to the module, once.
void deliver_fault() {
  if (!g_fault_ready.load(std::memory_order_acquire)) return;
  if (g_state.load(std::memory_order_acquire) == kScheduled) start_module();
  if (g_state.load(std::memory_order_acquire) != kStarted) return;
  if (g_delivered.exchange(true)) return;
  isolated([&] {
    PyObj res = call_module("_on_fault", "(szsss)", g_json.c_str(), g_text_for_python ? g_text.c_str() : nullptr,
                            g_note.c_str(), g_prior_note.c_str(), g_pointer.c_str());
    if (res) {
      if (g_text_for_python) g_text_printed.store(true, std::memory_order_release);
      g_py.DecRef(res);
    }
  });
}

int fault_pending(void*) {
  deliver_fault();
  return 0;
}

int audit_hook(const char* event, PyObj args, void*) {
  if (!g_fault_ready.load(std::memory_order_relaxed) || strcmp(event, "sys.excepthook") != 0) return 0;
  isolated([&] {
    deliver_fault();
    PyObj value = g_py.TupleGetItem(args, 2);  // (hook, type, value, traceback)
    if (!value) return;
    if (PyObj res = call_module("_on_uncaught", "(O)", value)) g_py.DecRef(res);
  });
  return 0;
}

}  // namespace

void python_bridge_start() noexcept {
  if (g_state.load(std::memory_order_acquire) != kNone) return;
  if (!resolve_api() || !g_py.IsInitialized()) return;  // no CPython here (or not running yet)
  int expected = kNone;
  if (!g_state.compare_exchange_strong(expected, kScheduled)) return;
  if (g_py.AddPendingCall(start_pending, nullptr) != 0) g_state.store(kFailed, std::memory_order_release);
}

static bool python_prints_report() {
  return g_kernel.load(std::memory_order_acquire) && g_state.load(std::memory_order_acquire) == kStarted;
}

bool python_bridge_fault(const std::string& report_json, const std::string& text, const std::string& note,
                         const std::string& prior_note, const std::string& pointer) noexcept {
  int s = g_state.load(std::memory_order_acquire);
  if ((s != kScheduled && s != kStarted) || g_fault_ready.load()) return false;
  if (!g_py.IsInitialized()) return false;  // the exit probe runs after the interpreter's finalization
  g_json = report_json;
  g_text = text;
  g_note = note;
  g_prior_note = prior_note;
  g_pointer = pointer;
  g_text_for_python = python_prints_report() && !text.empty();
  g_fault_ready.store(true, std::memory_order_release);
  g_py.AddPendingCall(fault_pending, nullptr);  // when it cannot be queued, the audit hook or a cell's error delivers
  return g_text_for_python;
}

void python_bridge_at_exit() noexcept {
  if (g_fault_ready.load(std::memory_order_acquire) && g_text_for_python &&
      !g_text_printed.load(std::memory_order_acquire))
    write_stderr(g_text.data(), g_text.size());
}

bool registered_source(const std::string& file, std::string* display, std::string* text) {
  if (g_state.load(std::memory_order_acquire) == kNone) return false;
  std::lock_guard<std::mutex> lock(g_sources_mutex);
  auto it = g_sources.find(file);
  if (it == g_sources.end()) return false;
  *display = it->second.first;
  *text = it->second.second;
  return true;
}

}  // namespace cdsa
