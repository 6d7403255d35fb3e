"""End-to-end: graphs built node by node, changed in the graph and in the exec, updated, cloned, with child graphs
and CUkernel nodes (tests/e2e/programs/graph_nodes.cc from C++, tests/e2e/scripts/graph_nodes.py from Python, both
on the simulated driver). Each replay that asserts is reported with the kernel it ran (picked among the graph's
kernel nodes by the device's assert text), the replay line, and the line that made or last changed that node; a
replay that faulted before its exec was changed is reported with the node it ran."""
import pathlib
import re

import pytest

from cdsa_report import graph_split
from conftest import PROGRAMS, SCRIPTS, marker_line, py_frame, run_cli, run_program, run_python

HERE = pathlib.Path(__file__).resolve().parent
PROGRAM = PROGRAMS / "e2e_graph_nodes"
SOURCE = HERE / "programs" / "graph_nodes.cc"

# mode -> (the marker of the line that made or last changed the failing node, how the report says it was made)
MODES = {
    "add": ("ADD-SITE", "Added by cuGraphAddKernelNode_v2 at"),
    "add-node": ("ADD-NODE-SITE", "Added by cuGraphAddNode_v2 at"),
    "set-before": ("SET-SITE", "Changed by cuGraphKernelNodeSetParams_v2 at"),
    "exec-set": ("EXEC-SET-SITE", "Changed by cuGraphExec"),
    "exec-update": ("CAPTURE-SITE", "Captured at"),
    "child": ("CAPTURE-SITE", "Captured at"),
    "clone": ("ADD-SITE", "Added by cuGraphAddKernelNode_v2 at"),
    "kern": ("KERN-SITE", "Added by cuGraphAddKernelNode_v2 at"),
}


def named_node(part):
    """The block of the node the device's assert names (up to the list of the others)."""
    start = part.index("the device's assert names this one:")
    end = part.index("Its other kernel nodes", start)
    return part[start:end]


def check_named(part, origin):
    assert "graph launch (graph" in part, part
    node = named_node(part)
    assert "kernel indexSelectSmallIndex  grid (2,1,1)" in node, part
    assert origin in node, part
    assert "fill_f32" in part[part.index("Its other kernel nodes"):], part  # the graph's other kernel is listed
    return node


@pytest.mark.parametrize("mode", list(MODES))
def test_cpp_graph_node_names_kernel_replay_and_node_lines(tmp_path, mode):
    run = run_program([PROGRAM, mode], cwd=tmp_path)
    assert run.rc == 3, run.err
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert part.startswith("cdsa: the failing launch"), part  # exact: the replay, and the node by the assert
    replay_line, _ = marker_line(SOURCE, "REPLAY-SITE")
    launched, nodes = graph_split(part)
    assert nodes, part
    assert f"graph_nodes.cc:{replay_line}" in launched, part
    marker, origin = MODES[mode]
    node = check_named(part, origin)
    line, _ = marker_line(SOURCE, marker)
    assert f"graph_nodes.cc:{line}" in node, part


@pytest.mark.parametrize("mode", list(MODES))
def test_python_graph_node_names_kernel_replay_and_node_lines(tmp_path, mode):
    run = run_python("graph_nodes.py", mode, cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert part.startswith("cdsa: the failing launch"), part
    launched, nodes = graph_split(part)
    assert nodes, part
    assert py_frame("graph_nodes.py", "REPLAY-SITE", "replay") in launched, part
    marker, origin = MODES[mode]
    if mode == "exec-set":
        origin = "Changed by cuGraphExecNodeSetParams at"  # the Python case changes it the XLA way
    if mode == "clone":
        marker = "CLONE-SITE"
    node = check_named(part, origin)
    function = "capture_index" if marker == "CAPTURE-SITE" else "main"
    assert py_frame("graph_nodes.py", marker, function) in node, part


# child-embedded: cuGraphChildGraphNodeGetGraph hands out the node's own graph (no copy): a kernel added to it runs in
# the replay; without following it the replay would hold two fill nodes only, and the report would name neither
# rightly. child-move: a child node made with CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE owns the child graph itself, so a
# kernel added through the child's handle afterwards is the node's (issue 26: cdsa kept a copy and missed it).
# edges: cuGraphAddDependencies_v2 / cuGraphRemoveDependencies_v2 change the order, never which nodes run.
# clone-cond: a clone's conditional body is a graph only cuGraphNodeGetParams (CUDA 13.2+) names; the program adds the
# asserting kernel to it through that handle, and cdsa, asking the driver the same at cuGraphClone, follows it (issue
# 27: before, a clone with conditional nodes was never exact).
@pytest.mark.parametrize("mode", ["child-embedded", "child-move", "edges", "clone-cond"])
def test_cpp_graph_of_three_kernel_nodes_names_the_added_one(tmp_path, mode):
    run = run_program([PROGRAM, mode], cwd=tmp_path)
    assert run.rc == 3, run.err
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert part.startswith("cdsa: the failing launch"), part
    assert "The graph holds 3 kernel nodes; the device's assert names this one:" in part, part
    node = check_named(part, "Added by cuGraphAddKernelNode_v2 at")
    line, _ = marker_line(SOURCE, "ADD-SITE")
    assert f"graph_nodes.cc:{line}" in node, part


def test_cpp_exec_update_shows_the_update_call(tmp_path):
    # The node came into the exec by cuGraphExecUpdate_v2: its capture line, and that call's line beside it.
    run = run_program([PROGRAM, "exec-update"], cwd=tmp_path)
    assert run.reports == 1, run.err
    node = named_node(run.launch_part())
    capture, _ = marker_line(SOURCE, "CAPTURE-SITE")
    update, _ = marker_line(SOURCE, "UPDATE-SITE")
    taken = node.index("Taken into the exec by cuGraphExecUpdate_v2 at")
    assert f"graph_nodes.cc:{capture}" in node[:taken], node
    assert f"graph_nodes.cc:{update}" in node[taken:], node
    assert "exec_update(" in node[taken:], node


def test_python_exec_update_shows_the_update_call_and_the_trace_keeps_it(tmp_path):
    run = run_python("graph_nodes.py", "exec-update", cwd=tmp_path)
    assert run.reports == 1, run.err
    node = named_node(run.launch_part())
    assert "Taken into the exec by cuGraphExecUpdate_v2 at" in node, node
    assert py_frame("graph_nodes.py", "UPDATE-SITE", "main") in node, node
    nodes = run.trace()["report"]["candidates"][0]["graph_nodes"]
    assert {n.get("update_call") for n in nodes} == {"cuGraphExecUpdate_v2"}, nodes
    again = run_cli("report", run.traces()[0])
    assert again.returncode == 0, again.stderr
    assert "Taken into the exec by cuGraphExecUpdate_v2 at" in again.stdout + again.stderr


def test_nodes_never_updated_show_no_update_call(tmp_path):
    run = run_program([PROGRAM, "exec-set"], cwd=tmp_path)
    assert run.reports == 1, run.err
    assert "Taken into the exec" not in run.report, run.report


def test_cpp_replay_before_the_exec_changed_names_the_node_it_ran(tmp_path):
    run = run_program([PROGRAM, "before-update"], cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert part.startswith("cdsa: the failing launch"), part
    assert "The graph holds 1 kernel node:" in part, part
    assert "kernel illegal_address" in part and "fill_f32" not in part, part
    line, _ = marker_line(SOURCE, "BAD-NODE-SITE")
    assert f"graph_nodes.cc:{line}" in part, part
    later, _ = marker_line(SOURCE, "LATER-UPDATE-SITE")
    assert f"graph_nodes.cc:{later}" not in part, part


def test_python_replay_before_the_exec_changed_names_the_node_it_ran(tmp_path):
    run = run_python("graph_nodes.py", "before-update", cwd=tmp_path)
    assert run.reports == 1, run.err
    part = run.launch_part()
    assert "kernel illegal_address" in part and "fill_f32" not in part, part
    assert py_frame("graph_nodes.py", "BAD-NODE-SITE", "main") in part, part
    trace = run.trace()
    nodes = trace["report"]["candidates"][0]["graph_nodes"]
    assert [n["launch"]["kernel"] for n in nodes] == ["illegal_address"]
    assert nodes[0]["origin"] == "added by cuGraphAddKernelNode_v2"


def test_trace_keeps_the_pick_and_cdsa_report_prints_the_same(tmp_path):
    run = run_python("graph_nodes.py", "add", cwd=tmp_path)
    cand = run.trace()["report"]["candidates"][0]
    kernels = [n["launch"]["kernel"] for n in cand["graph_nodes"]]
    assert kernels == ["fill_f32", "indexSelectSmallIndex"]
    assert cand["graph_node_pick"] == 1 and cand["graph_nodes_ambiguous"] is False
    again = run_cli("report", run.traces()[0])
    assert again.returncode == 0, again.stderr
    text = again.stdout + again.stderr
    assert "the device's assert names this one:" in text and "Added by cuGraphAddKernelNode_v2 at" in text, text


def test_torch_replay_gets_the_rerun_without_graphs_hint(tmp_path):
    shim = tmp_path / "shim"
    (shim / "torch" / "cuda").mkdir(parents=True)
    (shim / "torch" / "__init__.py").write_text("")
    (shim / "torch" / "cuda" / "__init__.py").write_text("")
    (shim / "torch" / "cuda" / "graphs.py").write_text("def replay_twice(exe, run):\n    run(exe)\n")
    run = run_python("graph_nodes.py", "torch", cwd=tmp_path, env={"TORCH_SHIM_DIR": str(shim)})
    assert run.reports == 1, run.err
    assert re.search(r"cdsa: hint: the fault is in a CUDA graph replay.*TORCHINDUCTOR_CUDAGRAPHS=0", run.report), run.report
    plain = run_python("graph_nodes.py", "add", cwd=tmp_path / "plain" if (tmp_path / "plain").mkdir() is None else tmp_path)
    assert "TORCHINDUCTOR_CUDAGRAPHS" not in plain.report  # no framework known: no such hint


def test_cdsa_report_resymbolizes_the_update_stack_and_json_holds_it(tmp_path):
    """A node taken into the exec by cuGraphExecUpdate: with the recorded native names removed from every stack of the
    trace, `cdsa report` restores the update call's frames as it does the node's own (the report's list of stacks
    includes the update stack), and `--json` holds that stack in place beside the id that names it."""
    import json
    run = run_program([PROGRAM, "exec-update"], cwd=tmp_path)
    assert run.reports == 1, run.err
    trace = run.traces()[0]
    data = json.loads(trace.read_text())
    node = data["report"]["candidates"][0]["graph_nodes"][0]
    assert node.get("update_stack_id") is not None, node
    for s in data["stacks"]:
        for f in s["stack"]["native"]:
            f["function"], f["file"], f["line"] = "", "", 0
    stripped = tmp_path / "stripped.json"
    stripped.write_text(json.dumps(data))
    again = run_cli("report", stripped)
    assert again.returncode == 0, again.stderr
    part = again.stdout[again.stdout.index("the device's assert names this one:"):]
    taken = part.index("Taken into the exec by cuGraphExecUpdate_v2 at")
    update, _ = marker_line(SOURCE, "UPDATE-SITE")
    assert f"graph_nodes.cc:{update}" in part[taken:] and "exec_update(" in part[taken:], part
    as_json = json.loads(run_cli("report", "--json", trace).stdout)
    for n in as_json["candidates"][0]["graph_nodes"]:
        if n.get("update_stack_id") is not None:
            assert n["update_stack"]["native"], n
