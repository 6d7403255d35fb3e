"""The report-reading module (cdsa_report.py) on canned output of the format report/format_text.cc prints."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cdsa_report as cr  # noqa: E402

REPORT = """
==================== cdsa: asynchronous CUDA fault ====================
cdsa: CUDA error 710 CUDA_ERROR_ASSERT: device-side assert triggered
cdsa: surfaced at cuMemcpyDtoH_v2 (thread 7), called from (most recent call last):
    File "/x/train.py", line 12, in <module>
      print("loss", loss.item())
cdsa: the failing launch (the first launch on its stream whose completion never landed):
  kernel void nll_loss_kernel<float>(float*)  grid (1,1,1) block (32,1,1) shared 0 B  stream 1  launch #3
  Launched from (most recent call last):
    File "/x/train.py", line 10, in step
      loss = F.cross_entropy(logits, labels)  # LOSS-LINE
    at::native::nll_loss_forward (libtorch_cuda.so+0x1234)
cdsa: hint: cross_entropy / nll_loss: a label is outside [0, num_classes)
cdsa: trace file cdsa-h-1.json
=======================================================================
"""
BEFORE = "Loss.cu:250: nll_loss_kernel: block: [0,0,0], thread: [2,0,0] Assertion failed.\n"
AFTER = "Traceback (most recent call last):\n  File \"/x/train.py\", line 12, in <module>\nRuntimeError: CUDA error\n"
ERR = BEFORE + REPORT + AFTER


def test_the_block_is_the_first_report_without_its_rule_and_dedented():
    block = cr.report_block(ERR)
    assert block.startswith(cr.BANNER + " ====")
    assert block.endswith("cdsa: trace file cdsa-h-1.json")
    assert "Traceback" not in block and "Loss.cu" not in block and "=" * 71 not in block
    assert 'File "/x/train.py", line 10, in step\nloss = F.cross_entropy' in block
    assert cr.report_block(BEFORE + AFTER) == ""
    assert cr.count_reports(ERR) == 1 and cr.count_reports(ERR + REPORT) == 2


def test_live_block_is_byte_for_byte_what_was_printed():
    assert cr.live_block(ERR) == REPORT
    assert cr.raw_report(ERR) == REPORT[REPORT.index(cr.BANNER):len(REPORT) - len(cr.RULE) - 2]
    assert cr.raw_report(ERR).endswith("cdsa: trace file cdsa-h-1.json")


def test_an_unfinished_report_is_seen_as_such():
    cut = BEFORE + REPORT[:REPORT.index("cdsa: hint")]
    span = cr.report_span(cut)
    assert not span.closed and span.close == -1 and span.end == len(cut)
    assert cr.report_block(cut).endswith("at::native::nll_loss_forward (libtorch_cuda.so+0x1234)")
    with pytest.raises(AssertionError):
        cr.raw_report(cut)
    with pytest.raises(AssertionError):
        cr.live_block(cut)
    # Cut before its closing rule and followed by a second report: the first ends at the second's banner line.
    two = BEFORE + REPORT[:REPORT.index("cdsa: hint")] + REPORT
    span = cr.report_span(two)
    assert not span.closed and two[span.close + 1:].startswith("=" * 20 + " " + cr.BANNER)
    assert cr.report_span("") is None


def test_parts_of_the_report():
    r = cr.report_block(ERR)
    launch, surfaced = cr.launch_part(r), cr.surfaced_part(r)
    assert surfaced + launch == r
    assert launch.startswith("cdsa: the failing launch") and "surfaced at" in surfaced
    assert cr.surfaced_at(r) == "cuMemcpyDtoH_v2"
    assert cr.kernel_line(r).startswith("kernel void nll_loss_kernel<float>(float*)  grid")
    assert cr.kernel_name(r) == "void nll_loss_kernel<float>(float*)"
    assert cr.kernel_lines(launch) == [cr.kernel_line(r)]
    assert cr.hint_lines(r) == ["cross_entropy / nll_loss: a label is outside [0, num_classes)"]
    assert cr.py_frames(launch) == [("/x/train.py", "10", "step")]
    assert cr.py_frames(surfaced) == [("/x/train.py", "12", "<module>")]
    assert cr.trace_written(r) == "cdsa-h-1.json"


def test_an_ambiguous_report_and_one_naming_no_launch():
    amb = cr.report_block(ERR.replace("cdsa: the failing launch (the first launch on its stream whose completion "
                                      "never landed):\n  kernel", "cdsa: AMBIGUOUS: 2 candidates\n  [1] kernel"))
    assert cr.launch_part(amb).startswith("cdsa: AMBIGUOUS")
    assert cr.kernel_line(amb).startswith("kernel void nll_loss_kernel") and cr.kernel_lines(amb)[0].startswith("[1] ")
    none = cr.report_block(BEFORE + REPORT[:REPORT.index("cdsa: the failing")] + "=" * 71 + "\n")
    assert cr.launch_part(none) == "" and cr.surfaced_part(none) == none
    assert cr.kernel_line(none) == "" and cr.kernel_name(none) == "" and cr.trace_written(none) == ""


def test_marker_line_in_every_comment_style(tmp_path):
    src = tmp_path / "s.cu"
    src.write_text("int a;\nlaunch();  // SITE-A\nx = 1  # SITE-B\nf(); /* SITE-C */\n// SITE-AB\n")
    assert cr.marker_line(src, "SITE-A") == (2, "launch();  // SITE-A")
    assert cr.marker_line(src, "SITE-B")[0] == 3 and cr.marker_line(src, "SITE-C")[0] == 4
    with pytest.raises(AssertionError):
        cr.marker_line(src, "SITE-D")


class Fake(cr.ReadsReport):
    def __init__(self, err, cwd="."):
        self.err, self.cwd = err, pathlib.Path(cwd)


class Strict(Fake):
    strict = True


def test_a_runs_result_reads_its_report(tmp_path):
    (tmp_path / "cdsa-h-2.json").write_text("{}")
    (tmp_path / "cdsa-h-1.json").write_text("{}")
    (tmp_path / "other.json").write_text("{}")
    run = Fake(ERR, tmp_path)
    assert run.reports == 1 and run.report == cr.report_block(ERR)
    assert run.launch_part() == cr.launch_part(run.report) and run.surfaced_at() == "cuMemcpyDtoH_v2"
    assert [p.name for p in run.traces()] == ["cdsa-h-1.json", "cdsa-h-2.json"]
    quiet = Fake(BEFORE)
    assert quiet.reports == 0 and quiet.report == "" and quiet.launch_part() == "" and quiet.kernel_line() == ""
    with pytest.raises(AssertionError, match="no cdsa report"):
        Strict(BEFORE).report
    no_launch = BEFORE + REPORT[:REPORT.index("cdsa: the failing")] + "=" * 71 + "\n"
    assert Fake(no_launch).launch_part() == ""
    with pytest.raises(AssertionError, match="names no launch"):
        Strict(no_launch).launch_part()


def test_a_graph_launch_is_cut_before_its_nodes():
    part = ("cdsa: the failing launch (the first launch on its stream whose completion never landed):\n"
            "graph launch (graph 4)  stream 1  launch #2\nLaunched from (most recent call last):\n"
            'File "/x/replay.py", line 8, in <module>\n'
            "The graph holds 1 captured kernel node:\n- kernel k  grid (1,1,1) block (1,1,1) shared 0 B\n"
            "Captured at (most recent call last):\n" 'File "/x/replay.py", line 3, in <module>\n')
    launched, nodes = cr.graph_split(part)
    assert launched + nodes == part
    assert launched.endswith('line 8, in <module>\n') and nodes.startswith("The graph holds 1 captured kernel node:")
    assert "line 3" in nodes and "line 3" not in launched
    assert cr.graph_split(cr.launch_part(cr.report_block(ERR))) == (cr.launch_part(cr.report_block(ERR)), "")
