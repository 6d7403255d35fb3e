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
