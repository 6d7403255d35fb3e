"""The oracle's own checks (ctest oracle.self, in the default run): the generator is deterministic and gives valid
programs, the ground-truth model follows the graph rules, the classifier sorts hand-made verdicts into the right
classes, and both runners run every op kind the same way under libcdsa.so."""
import copy
import json
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gen  # noqa: E402
import oracle  # noqa: E402
import program as P  # noqa: E402

BUILD = pathlib.Path(os.environ.get("TEST_BUILD_DIR", HERE.parent.parent / "build")).resolve()
CAPS = {"stream_alloc": 1}


def prog(ops, **kw):
    p = {"format": P.FORMAT, "version": P.VERSION, "seed": 0, "backend": "driver", "streams": 2,
         "stream_flags": [0, 0], "events": 1, "blocks": 1, "env": {}, "requires": [], "ops": ops}
    p.update(kw)
    return p


# ---- the generator ----------------------------------------------------------------------------------------------

def test_same_seed_same_program():
    for seed in (0, 1, 17, 123):
        assert P.canonical(gen.generate(seed, CAPS)) == P.canonical(gen.generate(seed, CAPS))


def test_every_program_has_exactly_one_fault():
    for seed in range(300):
        p = gen.generate(seed, CAPS)
        truth = P.ground_truth(p)
        assert truth["valid"], (seed, truth)
        assert P.fault_op_index(p) == truth["op"], seed
        ts = {op.get("t", 0) for op in p["ops"]}
        for name in ("graph", "exec"):  # every graph and exec belongs to one thread (the model relies on it)
            owners = {}
            for op in p["ops"]:
                if name in op:
                    owners.setdefault(op[name], set()).add(op.get("t", 0))
            assert all(len(v) == 1 for v in owners.values()), (seed, owners, ts)


def test_features_the_floors_name_are_generated():
    floors = json.loads((HERE / "floors.json").read_text())
    seen = set()
    for seed in range(300):
        seen.update(P.features(gen.generate(seed, CAPS)))
    seen.update({"runner_c", "runner_py", "runner_py_cdll", "runner_py_pydll", "all"})
    missing = [f for f in floors["exact_floor"] if f not in seen]
    assert not missing, f"features no program of seeds 0..299 exercises: {missing}"


def test_without_stream_alloc_no_program_needs_it():
    for seed in range(150):
        p = gen.generate(seed, {})
        assert "stream_alloc" not in p["requires"] and not any(op["op"] == "free_async" for op in p["ops"])


def test_capabilities_of_a_richer_sim_switch_features_on_and_leave_todays_programs_alone():
    future = dict(CAPS, devices=2, sched_seed=1, ctx_current_after_fault=1, ctx_sticky=1, assert_block=1)
    seen = set()
    for seed in range(200):
        p = gen.generate(seed, future)
        assert P.ground_truth(p)["valid"], seed
        seen.update(P.features(p))
        if p.get("devices") == 2:
            assert p["env"]["SIM_CUDA_DEVICES"] == "2"
            assert all(op["s"].startswith("x") for op in p["ops"] if op["op"] == "launch" and op["s"][0] == "x")
    assert {"devices_multi", "surface_other_device", "sim_sched_seed", "sim_ctx_after_fault", "fault_dev1",
            "ctx_fault", "dev_reset", "surface_other_ctx", "fault_reused_handle", "sched_pdl",
            "sim_assert_block_last"} <= seen
    missing = [f for f in P.features_for(future) if f not in seen and not f.startswith("runner_") and f != "all"]
    assert not missing, f"features the richer sim allows that no program of seeds 0..199 exercises: {missing}"
    # The draws for a capability happen only when it is there: without them, the same programs as before.
    for seed in range(100):
        a, b = gen.generate(seed, CAPS), gen.generate(seed, dict(CAPS, fault_log=1))
        assert P.canonical(a) == P.canonical(b)
        # The assert-block switch draws apart: the same program, with or without its variable.
        c = gen.generate(seed, dict(CAPS, assert_block=1))
        c["env"].pop("SIM_CUDA_ASSERT_BLOCK", None)
        assert P.canonical(a) == P.canonical(c), seed


# ---- the ground-truth model --------------------------------------------------------------------------------------

def kernel(k, grid, how="v2"):
    return {"k": k, "grid": grid, "how": how}


def test_a_queued_replay_keeps_the_kernel_it_was_launched_with():
    ops = [{"op": "build", "graph": "g0", "nodes": [kernel("nll_bad", 1)]},
           {"op": "instantiate", "graph": "g0", "exec": "e0"},
           {"op": "gate", "s": "s0", "id": 0},
           {"op": "graph_launch", "exec": "e0", "s": "s0", "fault": True},
           {"op": "exec_set", "exec": "e0", "src": "g0", "idx": 0, "k": "fill", "grid": 2},
           {"op": "open", "id": 0},
           {"op": "graph_launch", "exec": "e0", "s": "s0"}]
    t = P.ground_truth(prog(ops))
    assert t["valid"] and t["kind"] == "replay" and t["op"] == 3 and t["grid"] == 1


def test_a_node_changed_before_instantiation_is_what_runs():
    ops = [{"op": "capture", "s": "s0", "graph": "g0", "body": [{"k": "fill", "grid": 1}, {"k": "fill", "grid": 2}]},
           {"op": "node_set", "graph": "g0", "idx": 1, "k": "index_bad", "grid": 3},
           {"op": "instantiate", "graph": "g0", "exec": "e0"},
           {"op": "graph_launch", "exec": "e0", "s": "s1", "fault": True}]
    t = P.ground_truth(prog(ops))
    assert t["valid"] and t["grid"] == 3 and t["code"] == 710


def test_exec_update_takes_the_new_graphs_kernels_and_a_changed_topology_is_refused():
    base = [{"op": "build", "graph": "g0", "nodes": [kernel("fill", 1), {"node": "memset"}]},
            {"op": "instantiate", "graph": "g0", "exec": "e0"}]
    same = {"op": "build", "graph": "g1", "nodes": [kernel("illegal", 2), {"node": "memset"}]}
    other = {"op": "build", "graph": "g1", "nodes": [{"node": "memset"}, kernel("illegal", 2)]}
    tail = [{"op": "exec_update", "exec": "e0", "graph": "g1"},
            {"op": "graph_launch", "exec": "e0", "s": "s0", "fault": True}]
    assert P.ground_truth(prog(base + [same] + tail))["grid"] == 2
    assert not P.ground_truth(prog(base + [other] + tail))["valid"]  # nothing faults


def test_child_graphs_are_copies_and_disabled_nodes_do_not_run():
    ops = [{"op": "build", "graph": "g0", "nodes": [kernel("nll_bad", 1)]},
           {"op": "build", "graph": "g1", "nodes": [kernel("fill", 2), {"child": "g0"}]},
           {"op": "node_set", "graph": "g0", "idx": 0, "k": "fill", "grid": 3},  # the copy keeps nll_bad
           {"op": "instantiate", "graph": "g1", "exec": "e0"},
           {"op": "graph_launch", "exec": "e0", "s": "s0", "fault": True}]
    assert P.ground_truth(prog(ops))["grid"] == 1
    disabled = ops[:4] + [{"op": "enable", "exec": "e0", "src": "g1", "idx": 0, "on": 0}] + ops[4:]
    assert P.ground_truth(prog(disabled))["grid"] == 1  # idx 0 is the fill: the child still runs
    two = ops + [{"op": "launch", "s": "s1", "k": "illegal", "grid": 9}]
    assert not P.ground_truth(prog(two))["valid"]


def test_a_moved_child_graph_is_the_body_itself_and_gone_as_a_graph():
    # CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE: the parent owns the child graph; its handle names nothing of its own any
    # more, so a later op on it is skipped (the generator never makes one; the sim refuses it).
    ops = [{"op": "build", "graph": "g0", "nodes": [kernel("nll_bad", 1)]},
           {"op": "build", "graph": "g1", "nodes": [kernel("fill", 2), {"child": "g0", "how": "move"}]},
           {"op": "node_set", "graph": "g0", "idx": 0, "k": "fill", "grid": 3},
           {"op": "instantiate", "graph": "g1", "exec": "e0"},
           {"op": "graph_launch", "exec": "e0", "s": "s0", "fault": True}]
    truth = P.ground_truth(prog(ops))
    assert truth["valid"] and truth["grid"] == 1
    assert "child_move" in P.features(prog(ops))


def test_work_cdsa_cannot_record():
    ops = [{"op": "gate", "s": "s0", "id": 0}, {"op": "free_async", "s": "s0", "block": "a0"},
           {"op": "memop", "s": "s0", "target": "a0", "fault": True}, {"op": "open", "id": 0}]
    t = P.ground_truth(prog(ops))
    assert t["valid"] and t["kind"] == "unrecorded" and t["what"] == "memop"
    racy = copy.deepcopy(ops)
    racy[2]["s"] = "s1"
    assert not P.ground_truth(prog(racy))["valid"]
    thunk = [{"op": "launch", "s": "null", "api": "thunk", "k": "nll_bad", "grid": 1, "fault": True}]
    assert P.ground_truth(prog(thunk))["what"] == "thunk"


def test_the_fault_log_must_agree_with_the_truth():
    p = prog([{"op": "launch", "s": "s0", "k": "nll", "grid": 1},
              {"op": "launch", "s": "s0", "k": "nll_bad", "grid": 2, "fault": True}])
    t = P.ground_truth(p)
    name = "nll_loss_forward_reduce_cuda_kernel_2d"
    assert P.check_fault_log(t, f"1 1000 {name} grid 2 1 1 710\n") is None
    assert "grid 1" in P.check_fault_log(t, f"1 1000 {name} grid 1 1 1 710\n")
    assert "no fault" in P.check_fault_log(t, "")
    assert "2 faults" in P.check_fault_log(t, f"1 1000 {name} grid 2 1 1 710\n2 1001 illegal_address grid 3 1 1 700\n")
    memop = prog([{"op": "gate", "s": "s0", "id": 0}, {"op": "free_async", "s": "s0", "block": "a0"},
                  {"op": "memop", "s": "s0", "target": "a0", "fault": True}, {"op": "open", "id": 0}])
    assert P.check_fault_log(P.ground_truth(memop), "1 1000 cuStreamWriteValue32 grid 0 0 0 700") is None
    ctx = prog([{"op": "ctx", "how": "create_destroy", "d": 1, "k": "illegal", "grid": 5, "fault": True}],
               devices=2)
    t = P.ground_truth(ctx)
    assert t["valid"] and t["ctx"] == "created" and t["dev"] == 1
    assert P.check_fault_log(t, "3 1002 illegal_address grid 5 1 1 700") is None


def test_surfacing_through_another_contexts_objects():
    base = {"devices": 2, "dev1_streams": 1, "event_devs": [1]}
    ops = [{"op": "device", "d": 1}, {"op": "launch", "s": "x0", "k": "nll_bad", "grid": 1, "fault": True},
           {"op": "record", "s": "x0", "e": 0}, {"op": "device", "d": 0},
           {"op": "launch", "s": "s0", "k": "nll", "grid": 2},
           {"op": "sync", "how": "event", "e": 0, "rec": False}]
    fs = P.features(prog(ops, **base))
    assert {"fault_dev1", "surface_other_device", "surface_other_ctx", "devices_multi"} <= set(fs)
    assert "surface_exit" not in fs
    exit_only = prog(ops[:5], **base)
    assert "surface_exit" in P.features(exit_only)
    ctx = [{"op": "ctx", "how": "create_destroy", "k": "fill", "grid": 1, "names": list(gen.SHORT_NAMES)},
           {"op": "ctx", "how": "create_destroy", "k": "index_bad", "grid": 2, "fault": True, "surface": "ctx_v2"}]
    fs = P.features(prog(ctx))
    assert {"ctx_fault", "ctx_teardown", "fault_reused_handle", "surface_other_ctx"} <= set(fs)
    assert "surface_other_device" not in fs and "single_stream_plain" not in fs


# ---- the classifier ----------------------------------------------------------------------------------------------

def launch_rec(seq, grid, kind="kernel", tid=11):
    return {"seq": seq, "tid": tid, "kind": kind, "grid": [grid, 1, 1], "stream_id": 1000, "stream_seq": seq}


def cand(rec, why="first unfinished launch on stream 1000", nodes=(), pick=-1, ambiguous=False):
    return {"launch": rec, "why": why, "graph_nodes": [{"launch": {"grid": [g, 1, 1]}} for g in nodes],
            "graph_node_pick": pick, "graph_nodes_ambiguous": ambiguous}


def verdict(program, attribution, cands, launches, log, complete=True):
    trace = {"launches": launches, "report": {"attribution": attribution, "candidates": cands,
                                              "candidates_complete": complete}}
    result = {"tids": {"0": 11}, "launches": {"0": log}, "errors": [], "fault_launched": True, "sticky": 710}
    run = {"timed_out": False, "rc": 1, "err": "", "result": result, "trace": trace, "seconds": 0.1}
    return oracle.classify(program, P.ground_truth(program), run)["cls"]


def test_classes_of_plain_launches():
    p = prog([{"op": "launch", "s": "s0", "k": "nll", "grid": 1}, {"op": "launch", "s": "s1", "k": "nll", "grid": 2},
              {"op": "launch", "s": "s0", "k": "nll_bad", "grid": 3, "fault": True}])
    recs = [launch_rec(1, 1), launch_rec(2, 2), launch_rec(3, 3)]
    log = [[0, 1, "k"], [1, 2, "k"], [2, 3, "k"]]
    assert verdict(p, "exact", [cand(recs[2])], recs, log) == "exact-right"
    assert verdict(p, "exact", [cand(recs[1])], recs, log) == "wrong-certainty"
    assert verdict(p, "ambiguous", [cand(recs[1]), cand(recs[2])], recs, log) == "ambiguous-listed"
    assert verdict(p, "ambiguous", [cand(recs[0]), cand(recs[1])], recs, log) == "missed"
    matched = cand(recs[1], why="x; " + oracle.MATCH_TEXT + " in nll")
    assert verdict(p, "ambiguous", [matched, cand(recs[2])], recs, log) == "wrong-certainty"
    assert verdict(p, "unknown", [cand(recs[1])], recs, log) == "unknown-listed"


def test_a_faulting_memop_refused_at_its_call_never_ran():
    p = prog([{"op": "launch", "s": "s0", "k": "nll", "grid": 1}, {"op": "free_async", "s": "s0", "block": "a0"},
              {"op": "memop", "s": "s0", "bits": 32, "target": "a0", "fault": True}], blocks=1)
    result = {"tids": {"0": 11}, "launches": {"0": [[0, 1, "k"]]}, "fault_launched": False, "sticky": 0,
              "errors": [{"op": 2, "call": "cuStreamWriteValue32_v2", "code": 1}]}
    run = {"timed_out": False, "rc": 0, "err": "", "result": result, "trace": None, "seconds": 0.1}
    assert oracle.classify(p, P.ground_truth(p), run)["cls"] == oracle.NOT_RUN
    result["errors"] = [{"op": 0, "call": "cuLaunchKernel", "code": 1}]  # any other refusal is the oracle's bug
    assert oracle.classify(p, P.ground_truth(p), run)["cls"] == "invalid"


def test_a_stale_kernel_name_on_the_right_launch():
    p = prog([{"op": "launch", "s": "s0", "k": "nll", "grid": 1}, {"op": "launch", "s": "s1", "k": "index_bad",
                                                                   "grid": 2, "fault": True}])
    recs = [launch_rec(1, 1), launch_rec(2, 2)]
    for r in recs:
        r["kernel"] = "nll_loss_forward_reduce_cuda_kernel_2d"
    log = [[0, 1, "k"], [1, 2, "k"]]
    assert verdict(p, "exact", [cand(recs[1])], recs, log) == "wrong-certainty"
    assert verdict(p, "ambiguous", [cand(recs[0]), cand(recs[1])], recs, log) == "missed"
    recs[1]["kernel"] = "indexSelectSmallIndex"
    assert verdict(p, "exact", [cand(recs[1])], recs, log) == "exact-right"


def test_classes_of_replays_at_the_node():
    p = prog([{"op": "capture", "s": "s0", "graph": "g0",
               "body": [{"k": "fill", "grid": 1}, {"k": "nll_bad", "grid": 2}]},
              {"op": "instantiate", "graph": "g0", "exec": "e0"},
              {"op": "graph_launch", "exec": "e0", "s": "s0", "fault": True}])
    recs = [launch_rec(1, 1), launch_rec(2, 2), launch_rec(3, 1, kind="graph")]
    log = [[0, 1, "k"], [0, 2, "k"], [2, 0, "g"]]
    assert verdict(p, "exact", [cand(recs[2], nodes=(1, 2), pick=1)], recs, log) == "exact-right"
    assert verdict(p, "exact", [cand(recs[2], nodes=(1, 2), pick=0)], recs, log) == "wrong-certainty"
    assert verdict(p, "exact", [cand(recs[2], nodes=(1, 2), ambiguous=True)], recs, log) == "ambiguous-listed"
    assert verdict(p, "exact", [cand(recs[2], nodes=(1,))], recs, log) == "wrong-certainty"  # the stale node
    assert verdict(p, "exact", [cand(recs[2], nodes=(1,), ambiguous=True)], recs, log) == "missed"
    assert verdict(p, "exact", [cand(recs[2])], recs, log) == "ambiguous-listed"  # no nodes known: no claim


def test_classes_of_unrecorded_work():
    p = prog([{"op": "launch", "s": "null", "k": "fill", "grid": 1},
              {"op": "gate", "s": "s0", "id": 0}, {"op": "free_async", "s": "s0", "block": "a0"},
              {"op": "memop", "s": "s0", "target": "a0", "fault": True}, {"op": "open", "id": 0}])
    recs = [launch_rec(1, 1)]
    log = [[0, 1, "k"]]
    assert verdict(p, "exact", [cand(recs[0])], recs, log) == "wrong-certainty"
    assert verdict(p, "ambiguous", [cand(recs[0])], recs, log, complete=True) == "missed"
    assert verdict(p, "ambiguous", [cand(recs[0])], recs, log, complete=False) == "unrecorded-hedged"


def test_the_gate_fails_an_oracle_that_calls_everything_ambiguous():
    rows = [(["all", "single_stream_plain"], {"cls": "ambiguous-listed", "ncand": 2}) for _ in range(10)]
    classes, table = oracle.summarize(rows)
    bad = oracle.check_gate(classes, table, {"exact_floor": {"single_stream_plain": 1.0}})
    assert bad and "single_stream_plain" in bad[0]
    rows = [(["all", "single_stream_plain"], {"cls": "exact-right", "ncand": 1}) for _ in range(10)]
    assert oracle.check_gate(*oracle.summarize(rows), {"exact_floor": {"single_stream_plain": 1.0}}) == []
    assert oracle.check_gate(*oracle.summarize(rows), {"exact_floor": {"graph_cycles": 0.1}})  # left the generator
    # Every feature the driver allows must have programs, floored or not.
    assert oracle.check_gate(*oracle.summarize(rows), {}, expected=["single_stream_plain"]) == []
    bad = oracle.check_gate(*oracle.summarize(rows), {}, expected=["single_stream_plain", "fault_dev1"])
    assert bad and "fault_dev1" in bad[0]


def test_the_candidates_ceiling_fails_longer_lists_not_one_long_list():
    floors = {"mean_candidates_ceiling": {"node_enable": 11.72}}
    def rows(lists):
        return [(["node_enable"], {"cls": "ambiguous-listed", "ncand": n}) for n in lists]
    # Every list three times longer (what a regression in the attribution would do): above by many standard errors.
    bad = oracle.check_gate(*oracle.summarize(rows([12, 13, 14, 12, 13, 14, 12, 13, 14, 12, 13, 14])), floors)
    assert bad and "node_enable" in bad[0] and "standard error" in bad[0]
    # Twelve short lists and one PDL chain's 150 (seed 241 under load): a mean of 13.2, within two standard errors.
    lists = [2, 2, 2, 2, 2, 2, 3, 1, 1, 2, 3, 1, 150]
    classes, table = oracle.summarize(rows(lists))
    assert table["node_enable"]["mean_candidates"] > 11.72
    assert oracle.check_gate(classes, table, floors) == []
    assert oracle.mean_se(sum(lists), sum(n * n for n in lists), len(lists)) == pytest.approx(11.4, abs=0.1)


# ---- both runners, under libcdsa.so ------------------------------------------------------------------------------

def every_op_program(backend="driver"):
    """Every op kind once, the fault last (a bad nll on s0), no PDL group crossing anything."""
    ops = [{"op": "launch", "s": "s0", "api": "lk", "k": "fill", "grid": 1},
           {"op": "launch", "s": "ptsz", "api": "lkx", "k": "sleep", "us": 50, "grid": 2},
           {"op": "launch", "s": "pt", "api": "coop", "k": "index", "grid": 3},
           {"op": "launch", "s": "null", "api": "proc", "k": "nll", "grid": 4},
           {"op": "launch", "s": "legacy", "api": "lib", "k": "fill", "grid": 5},
           {"op": "launch", "s": "s1", "api": "pdl", "k": "fill", "grid": 6},
           {"op": "burst", "s": "s1", "api": "pdl", "k": "fill", "n": 3, "grid": 7},
           {"op": "record", "s": "s1", "e": 0}, {"op": "wait", "s": "s0", "e": 0},
           {"op": "copy", "s": "s0", "dir": "htod"}, {"op": "copy", "s": "ptsz", "dir": "dtoh"},
           {"op": "copy", "s": "s1", "dir": "dtod"}, {"op": "copy", "s": "s1", "dir": "memset"},
           {"op": "memop", "s": "s0", "bits": 32, "target": "host"},
           {"op": "memop", "s": "ptsz", "bits": 64, "target": "dev"},
           {"op": "gate", "s": "s1", "id": 3}, {"op": "open", "id": 3}, {"op": "host_sleep", "us": 100},
           {"op": "capture", "s": "s1", "graph": "g0", "to_graph": False, "mode": 0,
            "body": [{"k": "fill", "grid": 10}, {"node": "memop"}, {"node": "memcpy"}, {"k": "nll", "grid": 11}]},
           {"op": "capture", "s": "s0", "graph": "g1", "to_graph": True, "mode": 1,
            "body": [{"k": "fill", "grid": 12}]},
           {"op": "node_set", "graph": "g0", "idx": 0, "how": "v1", "k": "fill", "grid": 13},
           {"op": "node_set", "graph": "g0", "idx": 3, "how": "node", "k": "nll", "grid": 14},
           {"op": "build", "graph": "g2", "nodes": [kernel("fill", 15, "v1"), kernel("fill", 16, "kern"),
                                                    kernel("nll", 17, "node"), kernel("fill", 18, "node_v2"),
                                                    {"node": "empty"}, {"node": "memset"},
                                                    {"child": "g1", "how": "child"}, {"child": "g1", "how": "node"}]},
           {"op": "build", "graph": "g3", "nodes": [kernel("fill", 19), kernel("fill", 20), kernel("nll", 21),
                                                    kernel("fill", 22), {"node": "memset"},
                                                    {"child": "g1", "how": "child"}, {"child": "g1"}]},
           {"op": "instantiate", "graph": "g0", "exec": "e0"}, {"op": "instantiate", "graph": "g2", "exec": "e1"},
           {"op": "graph_launch", "exec": "e0", "s": "s1"}, {"op": "graph_launch", "exec": "e1", "s": "ptsz"},
           {"op": "exec_set", "exec": "e1", "src": "g2", "idx": 0, "how": "v1", "k": "fill", "grid": 23},
           {"op": "exec_set", "exec": "e1", "src": "g2", "idx": 1, "how": "v2", "k": "fill", "grid": 24},
           {"op": "exec_set", "exec": "e1", "src": "g2", "idx": 2, "how": "node", "k": "nll", "grid": 25},
           {"op": "enable", "exec": "e1", "src": "g2", "idx": 3, "on": 0},
           {"op": "exec_update", "exec": "e1", "graph": "g3", "how": "v1"},
           {"op": "exec_update", "exec": "e1", "graph": "g3", "how": "v2"},
           {"op": "graph_launch", "exec": "e1", "s": "s0"},
           {"op": "exec_destroy", "exec": "e0"}, {"op": "graph_destroy", "graph": "g0"},
           {"op": "cycles", "s": "s1", "n": 3, "how": "build", "grid": 30},
           {"op": "cycles", "s": "s0", "n": 3, "how": "capture", "grid": 31},
           {"op": "ctx", "how": "create_destroy", "k": "fill", "grid": 32},
           {"op": "sync", "how": "ctx"}, {"op": "reload"},
           {"op": "launch", "s": "s0", "api": "lk", "k": "fill", "grid": 33, "t": 1},
           {"op": "barrier"},
           {"op": "sync", "how": "ctx_v2"}, {"op": "sync", "how": "stream", "s": "ptsz"},
           {"op": "sync", "how": "stream_query", "s": "s1"}, {"op": "sync", "how": "event", "s": "s0", "e": 0},
           {"op": "sync", "how": "event_query", "s": "pt", "e": 0}, {"op": "sync", "how": "dtoh"},
           {"op": "sync", "how": "htod"}, {"op": "sync", "how": "memset"}, {"op": "sync", "how": "free"},
           {"op": "gate", "s": "s0", "id": 4}, {"op": "free_async", "s": "s0", "block": "a0"},
           {"op": "launch", "s": "s1", "api": "lk", "k": "nll_bad", "grid": 40, "fault": True},
           {"op": "open", "id": 4},
           {"op": "sync", "how": "stream", "s": "s1"}]
    return prog(ops, backend=backend, dll="pydll")


def contexts_program(backend="driver"):
    """Two devices, created contexts and a primary context's teardown: every context op of the format, the fault on
    device 1 surfacing through its event while device 0's context is current."""
    names = ["nll", "fill", "illegal", "index", "sleep"]
    ops = [{"op": "device", "d": 1},
           {"op": "launch", "s": "x0", "api": "lk", "k": "fill", "grid": 1},
           {"op": "launch", "s": "x1", "api": "lk", "k": "sleep", "us": 1000, "grid": 2},
           {"op": "device", "d": 0},
           {"op": "ctx", "how": "create_destroy", "d": 0, "k": "nll", "grid": 3, "names": names},
           {"op": "ctx", "how": "create_destroy", "d": 1, "k": "index", "grid": 4, "names": names[::-1]},
           {"op": "dev_reset", "d": 1, "how": "reset", "names": names},
           {"op": "dev_reset", "d": 1, "how": "release", "names": names[::-1]},
           {"op": "reload", "names": names},
           {"op": "launch", "s": "s0", "api": "lk", "k": "nll", "grid": 5},
           {"op": "sync", "how": "ctx_v2", "c": 1},
           {"op": "sync", "how": "event", "s": "s0", "e": 0},
           {"op": "record", "s": "s0", "e": 0}, {"op": "device", "d": 1},
           {"op": "sync", "how": "event_query", "e": 0, "rec": False},
           {"op": "launch", "s": "x0", "api": "pdl", "k": "nll", "grid": 6},
           {"op": "gate", "s": "x1", "id": 5},  # the fault waits until the event is recorded (no race)
           {"op": "launch", "s": "x1", "api": "lk", "k": "nll_bad", "grid": 7, "fault": True},
           {"op": "record", "s": "x1", "e": 1},
           {"op": "device", "d": 0},
           {"op": "launch", "s": "s0", "api": "lk", "k": "nll", "grid": 8},
           {"op": "open", "id": 5},
           {"op": "sync", "how": "event", "e": 1, "rec": False}]
    return prog(ops, backend=backend, dll="cdll", streams=1, stream_flags=[0], events=2, event_devs=[0, 1],
                devices=2, dev1_streams=2, env={"SIM_CUDA_DEVICES": "2"}, requires=["ctx_sticky", "devices"])


def built():
    return (BUILD / "lib" / "libcdsa.so").exists() and (BUILD / "tests" / "oracle" / "oracle_runner").exists()


@pytest.mark.skipif(not built(), reason="build first (libcdsa.so, oracle_runner)")
@pytest.mark.parametrize("backend", ["driver", "cupti", "inject"])
def test_both_runners_run_every_op_the_same_way(backend):
    setup = oracle.Setup(BUILD, BUILD / "lib" / "libcdsa.so", timeout=120)
    p = every_op_program(backend)
    truth = P.ground_truth(p)
    assert truth["valid"] and truth["grid"] == 40
    logs = {}
    for runner in ("c", "py"):
        run = oracle.run_program(setup, p, runner)
        res = run["result"]
        assert res is not None and res["done"], (runner, run["err"][-2000:])
        assert res["errors"] == [] and res["skipped"] == [], (runner, res["errors"], res["skipped"])
        assert res["fault_launched"] and res["sticky"] == 710, (runner, res)
        c = oracle.classify(p, truth, run)
        assert c["cls"] in oracle.OK_CLASSES, (runner, c, run["err"][-3000:])
        assert c.get("mapping_mismatches", 0) == 0, (runner, c)
        logs[runner] = res["launches"]
    assert logs["c"] == logs["py"]


@pytest.mark.skipif(not built(), reason="build first (libcdsa.so, oracle_runner)")
@pytest.mark.parametrize("backend", ["driver", "inject"])
def test_both_runners_run_the_context_ops_the_same_way(backend):
    setup = oracle.Setup(BUILD, BUILD / "lib" / "libcdsa.so", timeout=120, caps={"fault_log": 1})
    caps = oracle.probe_caps(BUILD)
    if not (caps.get("devices") and caps.get("ctx_sticky")):
        pytest.skip("the simulated driver has one context (no devices / ctx_sticky)")
    p = contexts_program(backend)
    truth = P.ground_truth(p)
    assert truth["valid"] and truth["grid"] == 7 and truth["dev"] == 1
    logs = {}
    for runner in ("c", "py"):
        run = oracle.run_program(setup, p, runner)
        res = run["result"]
        assert res is not None and res["done"], (runner, run["err"][-2000:])
        assert res["errors"] == [] and res["skipped"] == [], (runner, res["errors"], res["skipped"])
        assert res["fault_launched"] and res["sticky"] == 710 and res["sticky_call"] == "cuEventSynchronize", res
        assert P.check_fault_log(truth, run["sim_fault_log"]) is None, run["sim_fault_log"]
        assert oracle.classify(p, truth, run)["cls"] not in ("invalid", "crash", "oracle-error"), runner
        logs[runner] = res["launches"]
    assert logs["c"] == logs["py"]


def test_a_failure_the_next_run_does_not_repeat_is_flaky_and_one_it_repeats_is_the_verdict(monkeypatch):
    # The gate's --retries: a failing program runs again; a pass then makes it flaky (timing), a failure every time
    # stays the verdict, and a passing program runs once.
    answers = []

    def fake(setup, prog, runner):
        return {"cls": answers.pop(0)}, {}

    monkeypatch.setattr(oracle, "evaluate", fake)
    answers[:] = ["no-report", "exact-right"]
    c, _ = oracle.evaluate_retrying(None, {}, "c", 2)
    assert c["cls"] == "exact-right" and c["flaky"] == ["no-report"] and answers == []
    answers[:] = ["wrong-certainty", "wrong-certainty", "missed"]
    c, _ = oracle.evaluate_retrying(None, {}, "c", 2)
    assert c["cls"] == "missed" and c["attempts"] == 3 and "flaky" not in c and answers == []
    answers[:] = ["ambiguous-listed", "exact-right"]
    c, _ = oracle.evaluate_retrying(None, {}, "c", 2)
    assert c == {"cls": "ambiguous-listed"} and answers == ["exact-right"]
    answers[:] = ["no-report"]
    c, _ = oracle.evaluate_retrying(None, {}, "c", 0)
    assert c["cls"] == "no-report" and answers == []


def test_a_legacy_copy_beside_another_streams_700_is_no_plain_program():
    # A synchronous device-to-host copy runs on the legacy stream: beside a created stream's 700 it may be the work
    # that faulted (seeds 106648 and 113578 of the long run, honest lists); on the legacy stream itself it is ordered
    # after the launch, and a 710 is a kernel's whatever other work there is.
    def ops(s, k):
        return [{"op": "launch", "s": s, "k": k, "grid": 1, "fault": True}, {"op": "sync", "how": "dtoh"}]
    assert "single_stream_plain" not in P.features(prog(ops("s0", "illegal")))
    assert "single_stream_plain" not in P.features(prog(ops("pt", "illegal")))
    assert "single_stream_plain" in P.features(prog(ops("null", "illegal")))
    assert "single_stream_plain" in P.features(prog(ops("s0", "nll_bad")))


# ---- a long run in pieces: --merge ------------------------------------------------------------------------------

def test_merged_pieces_give_the_table_of_one_run(tmp_path, capsys):
    """Two --json pieces merged: the per-feature table is the one summarize() makes of all their records at once
    (features from each seed again), a seed in two pieces and pieces of other capabilities are refused."""
    classes = ["exact-right", "ambiguous-listed", "exact-right", "unknown-listed", "ambiguous-listed", "exact-right"]
    recs = [{"label": f"seed {s}", "runner": oracle.runners_for(s, "mix")[0], "seed": s, "cls": c, "ncand": 3,
             "fault_log": "agrees"} for s, c in zip(range(40, 46), classes)]

    def piece(name, rs, caps=CAPS):
        path = tmp_path / name
        path.write_text(json.dumps({"runs": rs, "classes": {}, "features": {}, "fault_log": {}, "seconds": 1.5,
                                    "caps": caps}))
        return str(path)

    a, b = piece("a.json", recs[:4]), piece("b.json", recs[4:])
    out = tmp_path / "all.json"
    assert oracle.merge([a, b], str(out)) == 0
    rows = [(oracle.run_features(gen.generate(r["seed"], CAPS), r["runner"]), r) for r in recs]
    want_classes, want_table = oracle.summarize(rows)
    got = json.loads(out.read_text())
    assert got["features"] == json.loads(json.dumps(want_table)) and got["classes"] == dict(want_classes)
    assert got["features"]["all"]["programs"] == 6 and got["seconds"] == 3.0
    assert "seeds 40..45 (6 runs)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="seed 41 .* is in two pieces"):
        oracle.merge([a, piece("c.json", recs[1:2])], None)
    with pytest.raises(SystemExit, match="other capabilities"):
        oracle.merge([a, piece("d.json", recs[4:], caps=dict(CAPS, devices=2))], None)
    failing = piece("e.json", [dict(recs[4], cls="wrong-certainty")])
    assert oracle.merge([a, failing], None) == 1
    # Pieces made by another generator (gen.py or program.py changed since): their features would be wrong.
    def stamp(fingerprint, *paths):
        for path in paths:
            d = json.loads(pathlib.Path(path).read_text())
            d["generator"] = fingerprint
            pathlib.Path(path).write_text(json.dumps(d))

    stamp("0" * 16, b)
    with pytest.raises(SystemExit, match="different generators"):
        oracle.merge([a, b], None)
    stamp("0" * 16, a, b)
    with pytest.raises(SystemExit, match="run --merge from the commit they ran on"):
        oracle.merge([a, b], None)
    stamp(oracle.generator_fingerprint(), a, b)
    assert oracle.merge([a, b], None) == 0
