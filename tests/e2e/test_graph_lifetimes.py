"""What libcdsa.so keeps per graph handle, through the real wrappers (cuGraphDestroy, cuGraphExecDestroy): a
CUgraph destroyed right after instantiation leaves its captured nodes to the exec, and an exec destroyed right
after it launched the faulting replay leaves them to the report. (That a destroyed handle names no capture any more,
and the bound on retired captures: tests/unit/graph_capture.)"""
import re

import pytest

from cdsa_report import graph_split
from conftest import py_frame, run_python


@pytest.mark.parametrize("mode", [[], ["exec-after-launch"]], ids=["graph_destroyed", "exec_destroyed_in_flight"])
def test_a_replay_whose_handles_were_destroyed_still_names_its_captured_node(tmp_path, mode):
    run = run_python("graph_destroyed_early.py", *mode, cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    replayed = re.search(r"graph launch \(graph (\d+)\)", part)
    assert replayed, part
    _, node = graph_split(part)
    assert node.startswith("The graph holds 1 captured kernel node:"), part
    assert f"[captured into graph {replayed.group(1)}]" in node, part
    assert py_frame("graph_replay.py", "CAPTURE-SITE", "capture") in node


# cuStreamBeginRecaptureToGraph (CUDA 13.3) re-captures into the graph's existing nodes, in creation order. It came
# back as a plain stream call: cdsa did not know the stream was capturing, so the recapture's launches were live
# launches with breadcrumbs, whose memops the recapture took for nodes (the simulated driver fails it then: a
# topology mismatch), and the graph kept its old kernels. Now no breadcrumb goes in, and the graph's kernel records
# are the recaptured ones.
def test_a_recaptured_graph_names_its_recaptured_kernel(tmp_path):
    run = run_python("graph_recapture.py", cwd=tmp_path)
    assert "recaptured" in run.out, run.out + run.err
    assert run.reports == 1, run.err
    t = run.trace()["report"]
    assert t["attribution"] == "exact", run.report
    _, node = graph_split(run.launch_part())
    assert node.startswith("The graph holds 2 captured kernel nodes; the device's assert names this one:"), node
    assert py_frame("graph_recapture.py", "RECAPTURE-NLL", "<module>") in node, node
    # The old kernels (launches #1 and #2) are gone; the other node is the recaptured fill, launch #3.
    assert "FIRST-CAPTURE" not in node and "launch #1 " not in node and "launch #2 " not in node, node
    assert re.search(r"kernel fill_f32 .* launch #3 ", node), node


def test_a_failed_recapture_names_no_node(tmp_path):
    run = run_python("graph_recapture.py", "fail", cwd=tmp_path)
    assert "recapture failed 901" in run.out, run.out + run.err  # CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert run.reports == 1, run.err
    assert "which one failed is not known" in run.report, run.report
    assert "a recapture failed or did not match the graph's nodes" in run.report, run.report
    assert "tables were full" not in run.report, run.report


# CIG capture (CUDA 13.1) came back as a plain stream call: cdsa placed its breadcrumb into the graphics command list
# (a memory operation, which a CIG stream refuses) and named the nll on the other stream as certain, although the
# recorded launches run whenever the graphics API submits them, outside every stream cdsa marks.
def test_a_cig_capture_keeps_every_later_verdict_inexact(tmp_path):
    run = run_python("cig_capture.py", cwd=tmp_path)
    assert "recorded" in run.out, run.out + run.err
    assert run.reports == 1, run.err
    assert "breadcrumb" not in run.err.split("=====")[0], run.err  # no mark of cdsa's was tried in the capture
    t = run.trace()["report"]
    assert t["attribution"] == "ambiguous", run.report
    assert "CIG capture, cuStreamBeginCaptureToCig" in run.report, run.report
    assert py_frame("cig_capture.py", "LAUNCH-SITE", "<module>") in run.launch_part(), run.report
