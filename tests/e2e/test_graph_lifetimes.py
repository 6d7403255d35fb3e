"""What libcdsa.so keeps per graph handle lives as long as a handle names it, through the real wrappers
(cuGraphDestroy, cuGraphExecDestroy): a CUgraph destroyed right after instantiation leaves its captured nodes to
the exec. (That destroyed graphs and execs leave no entries behind: tests/unit/graph_capture.)"""
import re

from conftest import py_frame, run_python


def test_an_exec_of_a_destroyed_graph_still_names_its_captured_node(tmp_path):
    run = run_python("graph_destroyed_early.py", cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    replayed = re.search(r"graph launch \(graph (\d+)\)", part)
    assert replayed, part
    node = part[part.index("The graph holds 1 captured kernel node:"):]
    assert f"[captured into graph {replayed.group(1)}]" in node, part
    assert py_frame("graph_replay.py", "CAPTURE-SITE", "capture") in node
