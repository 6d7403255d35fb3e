// report/hybrid_stack.h: the interleaved "most recent call last" stack, its folding and its fallback.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "report/fault_report.h"
#include "report/hybrid_stack.h"
#include "tests/unit/fixtures/report_fixtures.h"

namespace cdsa::report {
namespace {

using fixtures::native_frame;

PyFrame pf(const std::string& function, int line) { return fixtures::py_frame("train.py", function, line); }

const char* kPy = "/usr/lib/libpython3.11.so.1.0";
const char* kLibc = "/lib/x86_64-linux-gnu/libc.so.6";

// Innermost first, as recorded: the launch from a binding called through ctypes from Python 3.11.
CallStack ctypes_stack(bool with_binding) {
  CallStack st;
  st.native = {native_frame("cdsa::wrapped_cuLaunchKernel", "/opt/cdsa/lib/libcdsa.so")};
  if (with_binding) st.native.push_back(native_frame("at::native::embedding(at::Tensor const&)", "/x/libtorch_cuda.so"));
  for (auto f :
       {native_frame("ffi_call_unix64", "/usr/lib/libffi.so.8"), native_frame("ffi_call", "/usr/lib/libffi.so.8"),
        native_frame("_ctypes_callproc", "/x/_ctypes.cpython-311-x86_64-linux-gnu.so"),
        native_frame("PyCFuncPtr_call", "/x/_ctypes.cpython-311-x86_64-linux-gnu.so"), native_frame("_PyObject_MakeTpCall", kPy),
        native_frame("_PyEval_EvalFrameDefault", kPy), native_frame("PyEval_EvalCode", kPy), native_frame("run_mod", kPy), native_frame("Py_RunMain", kPy),
        native_frame("__libc_start_main@@GLIBC_2.34", kLibc), native_frame("_start", "/usr/bin/python3.11")})
    st.native.push_back(f);
  st.python = {pf("launch", 85), pf("compute_loss", 14), pf("<module>", 22)};
  return st;
}

// The entries as short strings: "py:NAME" or "native:NAME", outermost first.
std::vector<std::string> names(const HybridStack& h) {
  std::vector<std::string> out;
  for (const auto& e : h.entries) out.push_back(e.python ? "py:" + e.python->function : "native:" + e.native->function);
  return out;
}

TEST(HybridStack, PythonFramesTakeTheInterpretersPlaceAndTheInnermostNativePartStays) {
  CallStack st = ctypes_stack(true);
  HybridStack h = build_hybrid_stack(st, false);
  EXPECT_TRUE(h.merged);
  EXPECT_EQ(names(h), (std::vector<std::string>{"py:<module>", "py:compute_loss", "py:launch",
                                                "native:at::native::embedding(at::Tensor const&)"}));
  EXPECT_EQ(h.folded, 11u);  // every frame but cdsa's own (never shown) and the binding
}

TEST(HybridStack, NativeAllShowsEveryFrameButCdsasOwnInPlace) {
  CallStack st = ctypes_stack(true);
  HybridStack h = build_hybrid_stack(st, true);
  EXPECT_TRUE(h.merged);
  EXPECT_EQ(h.folded, 0u);
  std::vector<std::string> n = names(h);
  ASSERT_EQ(n.size(), 15u);  // 13 native frames + 3 Python frames - cdsa's frame
  EXPECT_EQ(n.front(), "native:_start");
  // The interpreter frame, then the Python frames it ran, then the call machinery down to the binding.
  auto eval = std::find(n.begin(), n.end(), "native:_PyEval_EvalFrameDefault");
  ASSERT_NE(eval, n.end());
  EXPECT_EQ(*(eval + 1), "py:<module>");
  EXPECT_EQ(*(eval + 3), "py:launch");
  EXPECT_EQ(*(eval + 4), "native:_PyObject_MakeTpCall");
  EXPECT_EQ(n.back(), "native:at::native::embedding(at::Tensor const&)");
  for (const auto& s : n) EXPECT_EQ(s.find("cdsa::"), std::string::npos) << s;
}

TEST(HybridStack, FramesBetweenTwoInterpreterRunsArePlacedWhenEachRunsOnePythonFrame) {
  // Python -> C extension (shown) -> Python callback -> launch.
  CallStack st;
  st.native = {native_frame("cuLaunchKernel", "/lib/libcuda.so.1"),
               native_frame("_PyEval_EvalFrameDefault", kPy),
               native_frame("_PyFunction_Vectorcall", kPy),
               native_frame("torch::autograd::THPFunction_apply", "/x/libtorch_python.so"),
               native_frame("cfunction_call", kPy),
               native_frame("_PyEval_EvalFrameDefault", kPy),
               native_frame("Py_RunMain", kPy)};
  st.python = {pf("forward", 30), pf("<module>", 5)};
  HybridStack h = build_hybrid_stack(st, false);
  EXPECT_TRUE(h.merged);
  EXPECT_EQ(names(h), (std::vector<std::string>{"py:<module>", "native:torch::autograd::THPFunction_apply",
                                                "py:forward", "native:cuLaunchKernel"}));
}

TEST(HybridStack, AnUnknownSplitAroundAShownFrameFallsBackToTwoLists) {
  // Two interpreter runs, three Python frames, and a frame worth showing between the runs: which run holds
  // the middle Python frame is not recorded, so the view does not guess.
  CallStack st;
  st.native = {native_frame("cuLaunchKernel", "/lib/libcuda.so.1"), native_frame("_PyEval_EvalFrameDefault", kPy),
               native_frame("torch::autograd::THPFunction_apply", "/x/libtorch_python.so"), native_frame("_PyEval_EvalFrameDefault", kPy),
               native_frame("_start", "/usr/bin/python3.11")};
  st.python = {pf("forward", 30), pf("apply", 20), pf("<module>", 5)};
  HybridStack h = build_hybrid_stack(st, false);
  EXPECT_FALSE(h.merged);
  EXPECT_EQ(h.python_count, 3u);
  EXPECT_EQ(names(h), (std::vector<std::string>{"py:<module>", "py:apply", "py:forward",
                                                "native:torch::autograd::THPFunction_apply", "native:cuLaunchKernel"}));
  EXPECT_EQ(h.folded, 3u);
}

TEST(HybridStack, AnUnknownSplitOverOnlyMachineryMergesFoldedButNotUnfolded) {
  CallStack st;
  st.native = {native_frame("cuLaunchKernel", "/lib/libcuda.so.1"), native_frame("_PyEval_EvalFrameDefault", kPy), native_frame("slot_tp_call", kPy),
               native_frame("_PyObject_Call", kPy), native_frame("_PyEval_EvalFrameDefault", kPy)};
  st.python = {pf("forward", 30), pf("_call_impl", 20), pf("train", 9), pf("<module>", 5)};
  HybridStack folded = build_hybrid_stack(st, false);
  EXPECT_TRUE(folded.merged);
  EXPECT_EQ(names(folded), (std::vector<std::string>{"py:<module>", "py:train", "py:_call_impl", "py:forward",
                                                     "native:cuLaunchKernel"}));
  // Shown, the machinery frames would sit at a guessed place between the Python frames.
  EXPECT_FALSE(build_hybrid_stack(st, true).merged);
}

TEST(HybridStack, AStrippedInterpreterPairsByItsModule) {
  CallStack st;
  st.native = {native_frame("cuLaunchKernel", "/lib/libcuda.so.1"), native_frame("", "/usr/bin/python3.11"), native_frame("", "/usr/bin/python3.11"),
               native_frame("", "/usr/bin/python3.11")};
  st.python = {pf("f", 3), pf("<module>", 9)};
  HybridStack h = build_hybrid_stack(st, false);
  EXPECT_TRUE(h.merged);
  EXPECT_EQ(names(h), (std::vector<std::string>{"py:<module>", "py:f", "native:cuLaunchKernel"}));
  EXPECT_EQ(h.folded, 3u);
}

TEST(HybridStack, ANativeStackCutBeforeTheInterpreterRanBelowThePythonFrames) {
  // The depth limit stopped the walk inside the op: no interpreter frame, no process start.
  CallStack st;
  st.native = {native_frame("cuLaunchKernel", "/lib/libcuda.so.1"),
               native_frame("at::native::nll_loss_forward_out_cuda", "/x/libtorch_cuda.so"),
               native_frame("at::_ops::nll_loss_forward::call", "/x/libtorch_cpu.so")};
  st.python = {pf("forward", 30), pf("<module>", 5)};
  HybridStack h = build_hybrid_stack(st, false);
  EXPECT_TRUE(h.merged);
  EXPECT_EQ(names(h),
            (std::vector<std::string>{"py:<module>", "py:forward", "native:at::_ops::nll_loss_forward::call",
                                      "native:at::native::nll_loss_forward_out_cuda", "native:cuLaunchKernel"}));
  // The whole stack, down to the start of the process, without an interpreter frame: nothing says where the
  // Python frames ran, so two lists.
  st.native.push_back(native_frame("main", "/opt/app/bin/embedding-host"));
  st.native.push_back(native_frame("__libc_start_main", kLibc));
  EXPECT_FALSE(build_hybrid_stack(st, false).merged);
}

TEST(HybridStack, MoreInterpreterRunsThanPythonFramesDoesNotPair) {
  CallStack st;
  st.native = {native_frame("cuLaunchKernel", "/lib/libcuda.so.1"), native_frame("_PyEval_EvalFrameDefault", kPy),
               native_frame("_PyEval_EvalFrameDefault", kPy)};
  st.python = {pf("f", 3)};  // the Python depth limit cut the rest
  EXPECT_FALSE(build_hybrid_stack(st, false).merged);
}

TEST(HybridStack, AThreadWithoutPythonFramesKeepsItsWholeNativeList) {
  CallStack st;
  st.native = {native_frame("cuLaunchKernel", "/lib/libcuda.so.1"), native_frame("wrapper", "/opt/cdsa/lib/libcdsa.so"),
               native_frame("torch::autograd::generated::EmbeddingBackward0::apply", "/x/libtorch_cpu.so"),
               native_frame("start_thread", kLibc), native_frame("__clone3", kLibc)};
  HybridStack h = build_hybrid_stack(st, false);
  EXPECT_FALSE(h.merged);
  EXPECT_EQ(h.python_count, 0u);
  EXPECT_EQ(names(h), (std::vector<std::string>{"native:__clone3", "native:start_thread",
                                                "native:torch::autograd::generated::EmbeddingBackward0::apply",
                                                "native:cuLaunchKernel"}));
  EXPECT_EQ(h.folded, 0u);
  // A Python thread whose frames could not be read: its interpreter frames are all that is left, so they stay.
  CallStack py;
  py.native = {native_frame("_PyObject_MakeTpCall", "/usr/lib/libpython3.10.so.1.0"),
               native_frame("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.10.so.1.0")};
  EXPECT_EQ(build_hybrid_stack(py, false).entries.size(), 2u);
}

TEST(HybridStack, RolesOfFrames) {
  EXPECT_EQ(native_frame_role(native_frame("x", "/a/libcdsa.so")), FrameRole::Cdsa);
  EXPECT_EQ(native_frame_role(native_frame("_PyEval_EvalFrameDefault.cold", "/usr/bin/python3.12")), FrameRole::Eval);
  EXPECT_EQ(native_frame_role(native_frame("PyObject_Vectorcall", "/a/libtorch_python.so")), FrameRole::Machinery);
  EXPECT_EQ(native_frame_role(native_frame("pybind11::cpp_function::dispatcher", "/a/libtorch_python.so")), FrameRole::Shown);
  EXPECT_EQ(native_frame_role(native_frame("anything", "/usr/lib/libpython3.12.so.1.0")), FrameRole::Machinery);
  // An extension module is not the interpreter.
  EXPECT_EQ(native_frame_role(native_frame("f", "/a/python3.11/site-packages/torch/_C.cpython-311-x86_64-linux-gnu.so")),
            FrameRole::Shown);
  EXPECT_FALSE(in_interpreter_module(native_frame("f", "/a/_C.cpython-311-x86_64-linux-gnu.so")));
}

TEST(HybridStackText, TheReportShowsOneListAndSaysWhatItFolded) {
  FaultReport r;
  r.code = 710;
  r.surfaced_stack = ctypes_stack(true);
  std::string text = format_report_text(r);
  EXPECT_NE(text.find("    File \"train.py\", line 14, in compute_loss\n    File \"train.py\", line 85, in launch\n"
                      "    at::native::embedding(at::Tensor const&) (libtorch_cuda.so+0x0)\n"
                      "    (11 interpreter and call-machinery frames folded; --native-all shows them)\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("Native frames"), std::string::npos) << text;
  EXPECT_EQ(text.find("_PyEval_EvalFrameDefault"), std::string::npos) << text;
  TextOptions all;
  all.native_all = true;
  std::string full = format_report_text(r, all);
  EXPECT_NE(full.find("    _PyEval_EvalFrameDefault (libpython3.11.so.1.0+0x0)\n    File \"train.py\", line 22"),
            std::string::npos)
      << full;
  EXPECT_EQ(full.find("folded"), std::string::npos);
  EXPECT_EQ(full.find("libcdsa"), std::string::npos);
}

TEST(HybridStackText, AFailedPairingSaysSoAndListsBoth) {
  FaultReport r;
  r.surfaced_stack.python = {pf("f", 3)};
  // The whole stack, but no interpreter frame recorded (an interpreter embedded in a stripped program).
  r.surfaced_stack.native = {native_frame("cuLaunchKernel", "/lib/libcuda.so.1"), native_frame("??", "/opt/app/bin/host"),
                             native_frame("_start", "/opt/app/bin/host")};
  std::string text = format_report_text(r);
  EXPECT_NE(text.find("    File \"train.py\", line 3, in f\n"
                      "    Native frames (most recent call last; not paired with the Python frames):\n"
                      "      ?? (host+0x0)\n"
                      "      cuLaunchKernel (libcuda.so.1+0x0)\n"
                      "    (1 interpreter and call-machinery frame folded; --native-all shows it)\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace cdsa::report
