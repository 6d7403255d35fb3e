// The report's header line and rank prefix, notebook cells in stacks (hybrid stack rule 6), and the one line that
// ends the program's traceback (report/note_text.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "report/fault_report.h"
#include "report/hybrid_stack.h"
#include "report/note_text.h"
#include "tests/unit/fixtures/report_fixtures.h"

namespace cdsa::report {
namespace {

using fixtures::native_frame;
using fixtures::py_frame;

// A launch made in notebook cell 2 through a helper, innermost first, as a Jupyter kernel records it.
CallStack kernel_stack() {
  CallStack st;
  st.python = {py_frame("/env/lib/python3.11/site-packages/simcuda.py", "launch", 85, "code = lib.cuLaunchKernel(f)"),
               py_frame("Cell In[2]", "<module>", 2, "cu.launch(nll, args)"),
               py_frame("/env/lib/python3.11/site-packages/IPython/core/interactiveshell.py", "run_code", 3577),
               py_frame("/env/lib/python3.11/site-packages/IPython/core/interactiveshell.py", "run_ast_nodes", 3517),
               py_frame("/env/lib/python3.11/asyncio/events.py", "_run", 84),
               py_frame("/env/lib/python3.11/site-packages/ipykernel/kernelapp.py", "start", 739),
               py_frame("<frozen runpy>", "_run_module_as_main", 198)};
  return st;
}

FaultReport sample_report() {
  FaultReport r = fixtures::assert_report("cuMemcpyDtoH_v2");
  r.attribution = Attribution::Exact;
  Candidate c;
  c.launch.kernel = "nll_loss_forward_reduce_cuda_kernel_2d";
  c.launch.kind = "kernel";
  c.stack.python = {py_frame("/src/simcuda.py", "launch", 85, "code = lib.cuLaunchKernel(f)"),
                    py_frame("/src/train.py", "compute_loss", 14, "cu.launch(nll, args)")};
  r.candidates.push_back(c);
  r.trace_path = "cdsa-node7-1234.json";
  return r;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t e = s.find('\n', pos);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(pos, e - pos));
    pos = e + 1;
  }
  return out;
}

TEST(ReportText, HeaderNamesTheRankProcessAndGpu) {
  FaultReport r = sample_report();
  r.origin = {3, 8, 1234, "node7", 1, "NVIDIA H200", "0000:3B:00.0"};
  std::vector<std::string> l = lines(format_report_text(r));
  ASSERT_GT(l.size(), 3u);
  EXPECT_EQ(l[2], "cdsa[rank 3]: rank 3 of 8, pid 1234 on node7, GPU 1 NVIDIA H200 (PCI 0000:3B:00.0)");
  for (const auto& line : l) {
    EXPECT_NE(line.rfind("cdsa: ", 0), 0u) << "a line without the rank: " << line;
  }
  EXPECT_EQ(l[3], "cdsa[rank 3]: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered");
}

TEST(ReportText, WithoutRankTheLinesKeepTheirPrefix) {
  FaultReport r = sample_report();
  r.origin.pid = 1234;
  r.origin.host = "node7";
  std::vector<std::string> l = lines(format_report_text(r));
  EXPECT_EQ(l[2], "cdsa: pid 1234 on node7");  // no GPU noted: none named
  EXPECT_EQ(l[3], "cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered");
  EXPECT_EQ(describe_origin({-1, -1, 9, "", 0, "", ""}), "pid 9, GPU 0");
  EXPECT_EQ(describe_origin({0, -1, 9, "h", -1, "", ""}), "rank 0, pid 9 on h");
}

TEST(ReportText, FramesOlderThanTheOutermostCellFoldIntoOneLine) {
  CallStack st = kernel_stack();
  HybridStack h = build_hybrid_stack(st, false);
  ASSERT_EQ(h.entries.size(), 2u);
  EXPECT_EQ(h.entries[0].python->file, "Cell In[2]");
  EXPECT_EQ(h.entries[1].python->function, "launch");
  EXPECT_EQ(h.folded_kernel, 5u);
  // --native-all: nothing folded.
  HybridStack all = build_hybrid_stack(st, true);
  EXPECT_EQ(all.entries.size(), 7u);
  EXPECT_EQ(all.folded_kernel, 0u);
  // Without a cell, nothing of this rule applies.
  st.python[1].file = "/src/notebook_export.py";
  EXPECT_EQ(build_hybrid_stack(st, false).folded_kernel, 0u);
}

TEST(ReportText, CellsAreNamedAsIPythonNamesThem) {
  FaultReport r = sample_report();
  r.candidates[0].stack = kernel_stack();
  std::string text = format_report_text(r);
  EXPECT_NE(text.find("    (5 frames of the Jupyter kernel before the cell folded: ipykernel, IPython, asyncio...; "
                      "--native-all shows them)\n    Cell In[2], line 2\n      cu.launch(nll, args)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("ipykernel/kernelapp.py"), std::string::npos) << text;
  TextOptions all;
  all.native_all = true;
  EXPECT_NE(format_report_text(r, all).find("ipykernel/kernelapp.py"), std::string::npos);
  // A function defined in a cell: ", in NAME" as IPython prints it.
  r.candidates[0].stack.python[1].function = "step";
  EXPECT_NE(format_report_text(r).find("    Cell In[2], line 2, in step\n"), std::string::npos);
}

TEST(TracebackNote, NamesTheUsersLaunchLineAndTheTrace) {
  FaultReport r = sample_report();
  EXPECT_EQ(traceback_note(r),
            "cdsa: the CUDA fault came from kernel nll_loss_forward_reduce_cuda_kernel_2d launched at simcuda.py:85: "
            "code = lib.cuLaunchKernel(f) (cdsa's report above; trace cdsa-node7-1234.json)");
  // Frames in site-packages and the standard library are the libraries', not the user's line.
  r.candidates[0].stack = kernel_stack();
  r.origin.rank = 2;
  EXPECT_EQ(traceback_note(r),
            "cdsa: the CUDA fault on rank 2 came from kernel nll_loss_forward_reduce_cuda_kernel_2d launched at "
            "Cell In[2], line 2: cu.launch(nll, args) (cdsa's report above; trace cdsa-node7-1234.json)");
  // AMBIGUOUS: the candidates, with no word of likelihood (issue 26: they come oldest first, an order, not evidence).
  r.attribution = Attribution::Ambiguous;
  r.candidates_complete = true;
  const std::string one =
      "kernel nll_loss_forward_reduce_cuda_kernel_2d launched at Cell In[2], line 2: "
      "cu.launch(nll, args)";
  EXPECT_EQ(traceback_note(r), "cdsa: the CUDA fault on rank 2 came from " + one +
                                   ", not proven (cdsa's report above; trace cdsa-node7-1234.json)");
  r.candidates.push_back(r.candidates[0]);
  EXPECT_EQ(traceback_note(r),
            "cdsa: the CUDA fault on rank 2 came from one of 2 launches cdsa could not tell apart: " + one + "; " +
                one + " (cdsa's report above; trace cdsa-node7-1234.json)");
  r.candidates.resize(7, r.candidates[0]);
  r.candidates_complete = false;
  EXPECT_NE(traceback_note(r).find("came from one of 7 launches cdsa could not tell apart, or from work cdsa did not "
                                   "see: " +
                                   one + "; " + one + "; and 5 more (cdsa's report above"),
            std::string::npos)
      << traceback_note(r);
  EXPECT_EQ(traceback_note(r).find("likely"), std::string::npos);
  r.candidates.resize(1);
  r.attribution = Attribution::Unknown;
  r.trace_path.clear();
  EXPECT_EQ(traceback_note(r), "cdsa: cdsa could not name the launch behind this CUDA fault on rank 2 (cdsa's report "
                               "above)");
}

TEST(TracebackNote, TheLineForAnUnrelatedErrorClaimsNoCause) {
  FaultReport r = sample_report();
  EXPECT_EQ(prior_fault_note(r),
            "cdsa: a CUDA fault was reported before this error: kernel nll_loss_forward_reduce_cuda_kernel_2d launched "
            "at simcuda.py:85: code = lib.cuLaunchKernel(f) (cdsa's report above; trace cdsa-node7-1234.json)");
  r.origin.rank = 2;
  r.attribution = Attribution::Ambiguous;
  r.candidates.push_back(r.candidates[0]);
  r.candidates_complete = true;
  EXPECT_NE(prior_fault_note(r).find("cdsa: a CUDA fault on rank 2 was reported before this error: one of 2 launches "
                                     "cdsa could not tell apart: kernel nll_loss"),
            std::string::npos)
      << prior_fault_note(r);
  r.attribution = Attribution::Unknown;
  r.trace_path.clear();
  EXPECT_EQ(prior_fault_note(r), "cdsa: a CUDA fault on rank 2 was reported before this error; cdsa could not name its "
                                 "launch (cdsa's report above)");
}

TEST(TracebackNote, OneLineEvenForLongOrMultiLineText) {
  FaultReport r = sample_report();
  r.candidates[0].launch.kernel = std::string(500, 'k');
  r.candidates[0].stack.python[0].source = "a\nb";
  for (const std::string& note : {traceback_note(r), prior_fault_note(r)}) {
    EXPECT_EQ(note.find('\n'), std::string::npos);
    EXPECT_LT(note.size(), 400u);
  }
}

TEST(TracebackNote, NativeOnlyLaunchNamesItsInnermostFunction) {
  FaultReport r = sample_report();
  r.candidates[0].stack.python.clear();
  r.candidates[0].stack.native = {native_frame("cdsa::wrapped_cuLaunchKernel", "/x/libcdsa.so"),
                                  native_frame("launch_nll(float*)", "/x/app")};
  r.candidates[0].stack.native[1].file = "/src/app.cc";
  r.candidates[0].stack.native[1].line = 40;
  EXPECT_NE(traceback_note(r).find("launched at launch_nll(float*) at app.cc:40 "), std::string::npos)
      << traceback_note(r);
}

TEST(TracebackNote, LaterCellsArePointedBackToTheReport) {
  FaultReport r = sample_report();
  r.candidates[0].stack = kernel_stack();
  r.surfaced_stack.python = {py_frame("/env/lib/python3.11/site-packages/simcuda.py", "sync", 9),
                             py_frame("Cell In[3]", "<module>", 1), py_frame("<frozen runpy>", "_run_module_as_main", 198)};
  EXPECT_EQ(restart_pointer(r),
            "cdsa: the CUDA context died earlier (a fault in kernel nll_loss_forward_reduce_cuda_kernel_2d launched at "
            "Cell In[2], line 2: cu.launch(nll, args); trace cdsa-node7-1234.json; cdsa's report is in Cell In[3]'s "
            "output): restart the kernel to use CUDA again");
}

}  // namespace
}  // namespace cdsa::report
