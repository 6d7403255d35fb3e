// The program's own Python, when it has one: the traceback note, notebook cells and the report as data.
//
// libcdsa.so embeds python/cdsa/_hook.py and runs it as the module `_cdsa_hook` (docs/python.md). Everything that
// touches the interpreter runs with the GIL held, in a pending call (Py_AddPendingCall: documented as callable from
// any thread without the GIL; the interpreter runs it on the main thread at its next check) or in the audit hook
// the first pending call adds (the "sys.excepthook" event: an uncaught exception about to be printed). CPython is
// found with dlsym at run time; without an initialized CPython in the process nothing here does anything.
//
// Contract:
//   python_bridge_start()    at cdsa's start (the process's first CUDA call), any thread: schedules the module's
//                            start (cell registration in a Jupyter kernel, the audit hook).
//   python_bridge_fault()    once, after the report was built, any thread: keeps the report (JSON), its text,
//                            the traceback note and the line for an unrelated exception that ends the program
//                            (report/note_text.h), and schedules their delivery to the module. In a Jupyter
//                            kernel (once the module started there) the module prints the report through the
//                            kernel's sys.stderr, so it lands in the cell's output, not on fd 2.
//   python_bridge_at_exit()  at exit: a report the module was to print but never did goes to fd 2.
//   registered_source()      a notebook cell's display name ("Cell In[2]") and source, by the file name
//                            IPython compiled it under; any thread.
// None of it is on the launch path.
#pragma once

#include <string>

namespace cdsa {

void python_bridge_start() noexcept;
// `text` empty: the report is not printed (CDSA_QUIET). True when the module will print `text` (a Jupyter kernel):
// the caller then does not write it to fd 2.
bool python_bridge_fault(const std::string& report_json, const std::string& text, const std::string& note,
                         const std::string& prior_note, const std::string& pointer) noexcept;
void python_bridge_at_exit() noexcept;
bool registered_source(const std::string& file, std::string* display, std::string* text);

}  // namespace cdsa
