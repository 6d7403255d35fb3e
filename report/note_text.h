// The one line cdsa adds to the end of the program's own traceback (a PEP 678 note on the exception the fault
// caused: python/cdsa/_hook.py), the line an unrelated exception that ends the program after the fault gets, and
// the line a later notebook cell failing on the dead context gets instead.
//
// Contract: pure functions of the report; allocate. Every line starts "cdsa: " and holds no newline.
//
//   cdsa: the CUDA fault came from kernel nll_loss_forward launched at train.py:14: loss = F.nll_loss(x, y)
//         (cdsa's report above; trace cdsa-node7-1234.json)            <- one line
//   cdsa: a CUDA fault was reported before this error: kernel nll_loss_forward launched at train.py:14: ...
#pragma once

#include <string>

#include "report/fault_report.h"

namespace cdsa::report {

// The frame a user reads as "where the launch was made": the innermost Python frame outside site-packages,
// dist-packages and the standard library (a notebook cell counts as the user's), else the innermost Python frame,
// else the innermost named native frame; "" when the stack has none.
std::string launch_site_text(const CallStack& st);
std::string traceback_note(const FaultReport& r);
// For an exception that ends the program (or a thread) after the fault but is not known to come from it: the same
// launch, worded so that it claims no cause.
std::string prior_fault_note(const FaultReport& r);
// For an error in a later notebook cell: which cell's output holds the report, and that the kernel must be
// restarted.
std::string restart_pointer(const FaultReport& r);

}  // namespace cdsa::report
