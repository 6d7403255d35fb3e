"""The oracle's program description: what an op list means, the ground truth it carries by construction, and the
features it exercises. tests/oracle/README.md is the format's reference; gen.py writes programs, runner.py and
runner.cc execute them, oracle.py classifies cdsa's verdict against `ground_truth(program)`.

Ground truth: every launch (and every kernel node) carries its own grid.x, so a launch record or a graph node in
cdsa's trace names the op (and node) it came from. `ground_truth` replays the program's graph bookkeeping (the
same skip rules the runners follow) and finds the launches that run a bad kernel: a valid program has exactly one,
or exactly one piece of work cdsa cannot record (a memop on a block freed in stream order, a launch through an
entry point newer than cdsa's headers) and no bad launch.
"""
import copy
import hashlib
import json

FORMAT = "cdsa-oracle-program"
VERSION = 1

GOOD_KERNELS = ("fill", "sleep", "nll", "index")
BAD_KERNELS = ("nll_bad", "index_bad", "illegal")
KERNEL_NAMES = {  # the sim's kernels (tests/sim/README.md)
    "fill": "fill_f32", "sleep": "sleep_us", "nll": "nll_loss_forward_reduce_cuda_kernel_2d",
    "nll_bad": "nll_loss_forward_reduce_cuda_kernel_2d", "index": "indexSelectSmallIndex",
    "index_bad": "indexSelectSmallIndex", "illegal": "illegal_address",
}
FAULT_CODE = {"nll_bad": 710, "index_bad": 710, "illegal": 700, "memop": 700}
CREATED_PREFIX = "s"
SPECIAL_STREAMS = ("null", "legacy", "pt", "ptsz")
SYNC_KINDS = ("ctx", "ctx_v2", "stream", "event", "stream_query", "event_query", "dtoh", "htod", "memset", "free")
LAUNCH_OPS = ("launch", "burst", "graph_launch")


def is_bad(k):
    return k in BAD_KERNELS


def canonical(program):
    return json.dumps(program, sort_keys=True, separators=(",", ":"))


def short_hash(program):
    return hashlib.sha256(canonical(program).encode()).hexdigest()[:10]


def threads_of(program):
    return 1 + max([op.get("t", 0) for op in program["ops"]] + [0])


# ---- the graph bookkeeping both runners follow (the skip rules are part of the format) --------------------------

def flatten(nodes):
    """A graph's nodes as an exec runs them: creation order (every generated graph is a chain or has no edges), child
    graphs inlined, empty nodes dropped. Each entry: dict(kind, k, grid, enabled)."""
    flat = []
    for n in nodes:
        if n["kind"] == "child":
            flat.extend(flatten(n["body"]))
        elif n["kind"] != "empty":
            flat.append({"kind": n["kind"], "k": n.get("k"), "grid": n.get("grid"), "enabled": True})
    return flat


def top_positions(nodes):
    """For each top-level node index, the flat positions it owns."""
    pos, out = 0, []
    for n in nodes:
        width = len(flatten([n]))
        out.append(list(range(pos, pos + width)))
        pos += width
    return out


class Model:
    """Follows an op list the way the runners execute it, per thread (every graph, exec and async block belongs to one
    thread), and reports what each launch op runs."""

    def __init__(self, program):
        self.program = program
        self.graphs = {}   # name -> list of nodes (dict kind, k, grid; child: body)
        self.execs = {}    # name -> dict(flat, src)
        self.freed = {}    # async block -> stream it was freed on
        self.runs = []     # (op index, sub index, content: list of (k, grid)) for every launch that runs
        self.unrecorded = []  # (op index, what) for work cdsa cannot record that faults
        self.skipped = []
        self.gates = {}    # closed gates: id -> stream
        self.held = {}     # stream -> its last launch is a long sleep

    def run(self):
        for i, op in enumerate(self.program["ops"]):
            getattr(self, "op_" + op["op"], self.op_other)(i, op)
        return self

    def op_other(self, i, op):
        pass

    def op_launch(self, i, op):
        self.held[op["s"]] = op["k"] == "sleep" and op.get("us", 0) >= 10000
        if op.get("api") == "thunk":
            if is_bad(op["k"]):
                self.unrecorded.append((i, "thunk"))
            return
        self.runs.append((i, 0, [(op["k"], op["grid"])]))

    def op_ctx(self, i, op):  # one launch in a created context (its own module's function)
        self.runs.append((i, 0, [(op.get("k", "fill"), op["grid"])]))

    def op_burst(self, i, op):
        for j in range(op["n"]):
            k = op.get("bad", op["k"]) if j == op.get("bad_at", -1) else op["k"]
            self.runs.append((i, j, [(k, op["grid"] + j)]))

    def op_capture(self, i, op):
        if op["graph"] in self.graphs:
            self.skipped.append(i)
            return
        nodes = []
        for item in op["body"]:
            if "k" in item:
                nodes.append({"kind": "kernel", "k": item["k"], "grid": item["grid"]})
            else:
                nodes.append({"kind": item["node"]})
        self.graphs[op["graph"]] = nodes

    def op_build(self, i, op):
        if op["graph"] in self.graphs:
            self.skipped.append(i)
            return
        nodes = []
        for item in op["nodes"]:
            if "k" in item:
                nodes.append({"kind": "kernel", "k": item["k"], "grid": item["grid"]})
            elif "child" in item:
                if item["child"] not in self.graphs:
                    continue  # skipped node
                if item.get("how") == "move":  # the child graph itself becomes the body: gone as a graph of its own
                    nodes.append({"kind": "child", "body": self.graphs.pop(item["child"])})
                else:
                    nodes.append({"kind": "child", "body": copy.deepcopy(self.graphs[item["child"]])})
            else:
                nodes.append({"kind": item["node"]})
        self.graphs[op["graph"]] = nodes

    def op_node_set(self, i, op):
        nodes = self.graphs.get(op["graph"])
        if nodes is None or op["idx"] >= len(nodes) or nodes[op["idx"]]["kind"] != "kernel":
            self.skipped.append(i)
            return
        nodes[op["idx"]] = {"kind": "kernel", "k": op["k"], "grid": op["grid"]}

    def op_instantiate(self, i, op):
        if op["graph"] not in self.graphs or op["exec"] in self.execs:
            self.skipped.append(i)
            return
        self.execs[op["exec"]] = {"flat": flatten(self.graphs[op["graph"]]), "src_list": self.graphs[op["graph"]],
                                  "src_nodes": copy.deepcopy(self.graphs[op["graph"]])}

    def _exec_node(self, op):
        e = self.execs.get(op["exec"])
        # Node handles are the source graph's: the very graph the exec was instantiated from, still alive.
        if e is None or self.graphs.get(op["src"]) is not e["src_list"]:
            return None, None
        nodes = e["src_list"]
        if op["idx"] >= len(nodes) or nodes[op["idx"]]["kind"] != "kernel":
            return None, None
        # The node's position in the exec: by the source graph as it was instantiated (node handles are the source
        # graph's). A graph changed after instantiation keeps its node count and kinds (node_set only).
        return e, top_positions(e["src_nodes"])[op["idx"]][0]

    def op_exec_set(self, i, op):
        e, pos = self._exec_node(op)
        if e is None:
            self.skipped.append(i)
            return
        e["flat"][pos].update(k=op["k"], grid=op["grid"])

    def op_enable(self, i, op):
        e, pos = self._exec_node(op)
        if e is None:
            self.skipped.append(i)
            return
        e["flat"][pos]["enabled"] = bool(op["on"])

    def op_exec_update(self, i, op):
        e = self.execs.get(op["exec"])
        if e is None or op["graph"] not in self.graphs:
            self.skipped.append(i)
            return
        fresh = flatten(self.graphs[op["graph"]])
        if [f["kind"] for f in fresh] != [f["kind"] for f in e["flat"]]:
            return  # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: nothing changes
        for old, new in zip(e["flat"], fresh):
            old.update(k=new["k"], grid=new["grid"])  # enabled states stay (the sim keeps them)

    def op_graph_launch(self, i, op):
        e = self.execs.get(op["exec"])
        if e is None:
            self.skipped.append(i)
            return
        self.runs.append((i, 0, [(f["k"], f["grid"]) for f in e["flat"] if f["kind"] == "kernel" and f["enabled"]]))

    def op_graph_destroy(self, i, op):
        if self.graphs.pop(op["graph"], None) is None:
            self.skipped.append(i)

    def op_exec_destroy(self, i, op):
        if self.execs.pop(op["exec"], None) is None:
            self.skipped.append(i)

    def op_gate(self, i, op):
        self.gates[op["id"]] = op["s"]

    def op_open(self, i, op):
        self.gates.pop(op["id"], None)

    def op_free_async(self, i, op):
        if op["block"] in self.freed:
            self.skipped.append(i)
            return
        # The free must still be queued when the memop naming the block is submitted (else the driver refuses the
        # memop at once): held behind a closed gate, or a long sleep, on its stream.
        held = op["s"] in self.gates.values() or self.held.get(op["s"], False)
        self.freed[op["block"]] = (op["s"], held)

    def op_memop(self, i, op):
        target = op.get("target", "host")
        if target in self.freed:
            s, held = self.freed[target]
            self.unrecorded.append((i, "memop" if s == op["s"] and held else "memop-racy"))


def ground_truth(program):
    """dict(valid, why, kind, op, sub, grid, code, kernel) for the one faulting piece of work.
    kind: "launch" (a kernel launch: grid is its own), "replay" (a graph launch: grid is the failing node's),
    "unrecorded" (work cdsa cannot record: no launch is the right answer)."""
    m = Model(program).run()
    bad = []
    for i, j, content in m.runs:
        for k, grid in content:
            if is_bad(k):
                bad.append((i, j, k, grid))
                break  # the first bad node of a replay faults; nothing after it on that stream runs
    if any(what == "memop-racy" for _, what in m.unrecorded):
        return {"valid": False, "why": "a memop on a block freed on another stream, or a free nothing holds (racy)"}
    n = len(bad) + len(m.unrecorded)
    if n != 1:
        return {"valid": False, "why": f"{len(bad)} faulting launches and {len(m.unrecorded)} unrecorded faults"}
    if m.unrecorded:
        i, what = m.unrecorded[0]
        op = program["ops"][i]
        return {"valid": True, "kind": "unrecorded", "what": what, "op": i, "sub": 0, "grid": op.get("grid"),
                "code": FAULT_CODE.get(op.get("k"), 700) if what == "thunk" else 700,
                "kernel": KERNEL_NAMES.get(op.get("k"), ""), "dev": fault_device(program, i), "ctx": "primary"}
    i, j, k, grid = bad[0]
    op = program["ops"][i]
    return {"valid": True, "kind": "replay" if op["op"] == "graph_launch" else "launch", "op": i, "sub": j,
            "grid": grid, "code": FAULT_CODE[k], "kernel": KERNEL_NAMES[k], "skipped": m.skipped,
            "dev": fault_device(program, i), "ctx": "created" if op["op"] == "ctx" else "primary"}


def fault_device(program, i):
    """The device whose context the faulting op's work runs in: a created context's (`ctx` op) or the stream's."""
    op = program["ops"][i]
    if op["op"] == "ctx":
        return op.get("d", 0)
    return 1 if str(op.get("s", "")).startswith("x") else 0


def expected_fault_log(truth):
    """What the sim's fault log (SIM_CUDA_FAULT_LOG) must hold for this truth: (names allowed, grid x, code)."""
    if truth["kind"] == "unrecorded" and truth["what"] != "thunk":
        return ({"cuStreamWriteValue32", "cuStreamWriteValue64"}, 0, 700)
    return ({truth["kernel"]}, truth["grid"], truth["code"])


def parse_fault_log(text):
    """The sim's fault log lines: dict(ctx, stream, name, grid, code) each (tests/sim/README.md)."""
    out = []
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) < 8 or f[3] != "grid":
            out.append({"bad_line": line})
            continue
        out.append({"ctx": int(f[0]), "stream": int(f[1]), "name": f[2], "grid": [int(x) for x in f[4:7]],
                    "code": int(f[7])})
    return out


def check_fault_log(truth, text):
    """None when the sim's own record of the faults agrees with the generator's idea of the one faulting piece of
    work, else why not (an oracle bug: the run is invalid, never counted against cdsa)."""
    lines = parse_fault_log(text)
    if not lines:
        return "the sim logged no fault: the faulting work never ran"
    if len(lines) > 1:
        return f"the sim logged {len(lines)} faults: {[ln.get('name', ln.get('bad_line')) for ln in lines[:3]]}"
    ln = lines[0]
    if "bad_line" in ln:
        return f"the sim's fault log line is not understood: {ln['bad_line']!r}"
    names, grid, code = expected_fault_log(truth)
    if ln["name"] not in names or ln["grid"][0] != grid or ln["code"] != code:
        return (f"the sim logged {ln['name']} grid {ln['grid'][0]} code {ln['code']}; the generator's fault is "
                f"{'/'.join(sorted(names))} grid {grid} code {code}")
    return None


def fault_op_index(program):
    for i, op in enumerate(program["ops"]):
        if op.get("fault"):
            return i
    return None


# ---- features: what a program exercises (per-feature counts and exact rates) --------------------------------------

def stream_refs(program):
    refs = set()
    for op in program["ops"]:
        for key in ("s", "s2"):
            if key in op:
                refs.add(op[key])
    return refs


# Every feature a program can exercise, and the capabilities of the simulated driver it needs (oracle.py probes
# them): a run prints each one's count, zero included, and the gate fails when one the driver allows has none.
FEATURE_CAPS = {
    "devices_multi": ("devices",), "fault_dev1": ("devices",), "surface_other_device": ("devices",),
    "dev_reset": ("devices", "ctx_sticky"), "ctx_fault": ("ctx_sticky",), "surface_other_ctx": ("ctx_sticky",),
    "fault_reused_handle": ("ctx_sticky",), "sim_sched_seed": ("sched_seed",), "sched_pdl": ("sched_seed",),
    "sim_ctx_after_fault": ("ctx_current_after_fault",), "sim_ctx_after_fault_ok": ("ctx_current_after_fault",),
    "stream_ordered_free": ("stream_alloc",), "fault_memop": ("stream_alloc",),
    "sim_assert_block_last": ("assert_block",),
}
ALL_FEATURES = sorted({
    "all", "backend_driver", "backend_cupti", "backend_inject", "streams_multi", "stream_legacy", "stream_per_thread",
    "threads_multi", "events", "cross_stream_wait", "async_copy", "memop", "gate", "capture", "capture_to_graph",
    "graph_built", "child_graph", "child_move", "graph_add_node", "node_set", "exec_set", "exec_update", "node_enable",
    "graph_cycles", "graph_cycles_2048", "graph_replays", "module_reload", "ctx_teardown", "handle_reuse", "pdl",
    "pdl_long", "api_lkx", "api_proc", "api_lib", "api_coop", "api_thunk", "surface_exit", "surface_teardown",
    "fault_launch", "fault_replay", "fault_thunk", "fault_700", "fault_710", "single_stream_plain", "runner_c",
    "runner_py", "runner_py_cdll", "runner_py_pydll",
} | {"sync_" + k for k in SYNC_KINDS} | set(FEATURE_CAPS))


def features_for(caps):
    """The features a run over a driver with these capabilities must exercise."""
    return [f for f in ALL_FEATURES if all(caps.get(c) for c in FEATURE_CAPS.get(f, ()))]


def stream_device(ref, cur):
    if ref.startswith("x"):
        return 1
    if ref.startswith("s"):
        return 0
    return cur  # the special handles are the current context's own streams


def surfacings(program, truth):
    """Where the fault can surface: (ops after it that answer the faulting context's state, those of them that name
    its object while another context is current, whether the faulting op itself surfaces it). An approximation from
    the op list (timing decides which call is first)."""
    ops = program["ops"]
    fault = truth["op"]
    event_devs = program.get("event_devs", [0] * program.get("events", 0))
    cur = {}
    here, other = [], []
    fop = ops[fault]
    if fop["op"] == "ctx":  # a created context: only the op itself names it
        how = fop.get("surface", "stream")
        cur_dev = 0
        for op in ops[:fault]:
            if op["op"] == "device" and op.get("t", 0) == fop.get("t", 0):
                cur_dev = op["d"]
        if how != "exit":
            here.append(fault)
            if how in ("ctx_v2", "event", "event_query"):
                other.append((fault, cur_dev != fop.get("d", 0)))
        return here, other, how != "exit"
    dev = truth.get("dev", 0)
    for i, op in enumerate(ops):
        t = op.get("t", 0)
        c = cur.get(t, 0)
        if op["op"] == "device":
            cur[t] = op["d"]
        if i <= fault:
            continue
        kind = op["op"]
        if kind == "device" and op["d"] == dev:
            here.append(i)  # cuCtxSetCurrent answers the context it makes current
        elif kind == "ctx" and c == dev:
            here.append(i)  # cuCtxCreate answers the current context
        elif kind == "sync":
            how = op["how"]
            if how in ("ctx", "dtoh", "htod", "memset", "free") or (how == "ctx_v2" and "c" not in op):
                if c == dev:
                    here.append(i)
            elif how == "ctx_v2":
                if op["c"] == dev:
                    here.append(i)
                    other.append((i, c != dev))
            elif how in ("stream", "stream_query"):
                if stream_device(op["s"], c) == dev:
                    here.append(i)
                    if not op["s"][0] in "sx" or c == dev:
                        continue
                    other.append((i, True))
            elif how in ("event", "event_query"):
                if event_devs[op["e"]] == dev:
                    here.append(i)
                    if c != dev:
                        other.append((i, True))
    return here, other, False


def features(program, truth=None):
    truth = truth or ground_truth(program)
    ops = program["ops"]
    kinds = [op["op"] for op in ops]
    f = set()
    f.add("backend_" + program.get("backend", "driver"))
    launch_streams = {op["s"] for op in ops if op["op"] in ("launch", "burst", "graph_launch", "cycles")}
    launch_streams = {s for s in launch_streams if not s.startswith("x")} | (
        {"x"} if any(s.startswith("x") for s in launch_streams) else set())
    launch_streams |= {f"ctx{i}" for i, op in enumerate(ops) if op["op"] == "ctx"}  # each on its own stream
    refs = stream_refs(program)
    if len(launch_streams | {op["s"] for op in ops if op["op"] in ("memop", "copy", "capture")}) > 1:
        f.add("streams_multi")
    for special in ("null", "legacy"):
        if special in refs:
            f.add("stream_legacy")
    if "pt" in refs or "ptsz" in refs:
        f.add("stream_per_thread")
    if threads_of(program) > 1:
        f.add("threads_multi")
    if program.get("devices", 1) > 1:
        f.add("devices_multi")
    env = program.get("env", {})
    if "SIM_CUDA_SCHED_SEED" in env:
        f.add("sim_sched_seed")
    if env.get("SIM_CUDA_ASSERT_BLOCK") == "last":
        f.add("sim_assert_block_last")
    if "SIM_CUDA_CTX_CURRENT_AFTER_FAULT" in env:
        f.add("sim_ctx_after_fault")
        if env["SIM_CUDA_CTX_CURRENT_AFTER_FAULT"] == "ok":
            f.add("sim_ctx_after_fault_ok")
    if "record" in kinds or "wait" in kinds:
        f.add("events")
    if "wait" in kinds:
        f.add("cross_stream_wait")
    freed = False  # an earlier teardown or unload freed function handles: the next ones reuse their addresses
    for op in ops:
        if op["op"] == "sync":
            f.add("sync_" + op["how"])
        elif op["op"] == "copy":
            f.add("async_copy")
        elif op["op"] == "memop":
            f.add("memop")
        elif op["op"] == "gate":
            f.add("gate")
        elif op["op"] == "capture":
            f.add("capture_to_graph" if op.get("to_graph") else "capture")
        elif op["op"] == "build":
            f.add("graph_built")
            if any("child" in n for n in op["nodes"]):
                f.add("child_graph")
            if any(n.get("how") == "move" for n in op["nodes"] if "child" in n):
                f.add("child_move")
            hows = {n.get("how") for n in op["nodes"] if "k" in n}
            if hows & {"node", "node_v2"}:
                f.add("graph_add_node")
        elif op["op"] == "node_set":
            f.add("node_set")
        elif op["op"] == "exec_set":
            f.add("exec_set")
        elif op["op"] == "exec_update":
            f.add("exec_update")
        elif op["op"] == "enable":
            f.add("node_enable")
        elif op["op"] == "cycles":
            f.add("graph_cycles")
        elif op["op"] == "reload":
            f.update(("module_reload", "handle_reuse"))
            freed = True
        elif op["op"] == "dev_reset":
            f.update(("dev_reset", "handle_reuse"))
            freed = True
        elif op["op"] == "ctx":
            f.add("ctx_fault" if op.get("fault") else "ctx_teardown")
            if freed:
                f.add("handle_reuse")
            freed = freed or not op.get("fault")
        elif op["op"] == "free_async":
            f.add("stream_ordered_free")
        if op["op"] in ("launch", "burst"):
            api = op.get("api", "lk")
            if api == "pdl":
                f.add("pdl")
            elif api != "lk":
                f.add("api_" + api)
    if "pdl" in f and "sim_sched_seed" in f:
        f.add("sched_pdl")  # secondaries may run beside their primary, marks after them land before it ends
    if sum(op["n"] for op in ops if op["op"] == "cycles") >= 2048:
        f.add("graph_cycles_2048")
    if max(pdl_chain_lengths(program) + [0]) > 64:
        f.add("pdl_long")
    launches = [op for op in ops if op["op"] == "graph_launch"]
    per_exec = {}
    for op in launches:
        per_exec[op["exec"]] = per_exec.get(op["exec"], 0) + 1
    if any(v > 1 for v in per_exec.values()):
        f.add("graph_replays")
    fault = fault_op_index(program)
    if truth.get("valid"):
        here, other, in_op = surfacings(program, truth)
        if not here:
            f.add("surface_exit")
        if other:
            f.add("surface_other_ctx")
            if any(cross for _, cross in other):
                f.add("surface_other_device")
        if program.get("end") == "reset":
            f.add("surface_teardown")
        f.add("fault_" + (truth.get("what") if truth["kind"] == "unrecorded" else truth["kind"]))
        if truth["kind"] != "unrecorded":
            f.add("fault_" + {700: "700", 710: "710"}[truth["code"]])
        if truth.get("dev") == 1:
            f.add("fault_dev1")
        before = ops[:truth["op"]]
        fop = ops[truth["op"]]
        if fop["op"] == "ctx":
            if any(op["op"] in ("reload", "dev_reset") or (op["op"] == "ctx" and not op.get("fault"))
                   for op in before):
                f.add("fault_reused_handle")
        elif truth.get("dev") == 1:
            if any(op["op"] == "dev_reset" for op in before):
                f.add("fault_reused_handle")
        elif fop["op"] != "memop" and any(op["op"] == "reload" for op in before):
            f.add("fault_reused_handle")
    elif fault is not None and program.get("end") == "reset":
        f.add("surface_teardown")
    graphs = {"capture", "build", "cycles", "graph_launch"} & set(kinds)
    # Where the fault is no device-side assert (which only a kernel prints), device work that is no launch may be what
    # faulted, unless a fact shows it finished: a copy or memory operation, a synchronous host-to-device copy or
    # memset (both may still run when they return), or any of them under CUPTI alone (unseen). Such a program is
    # honestly ambiguous, so it is no "plain" one (whose floor is 100 % exact, issue 26).
    # So is a synchronous device-to-host copy beside launches on another stream than the legacy one: it runs on the
    # legacy stream, after a non-blocking stream's work or beside it, and the copy that returned the fault may be
    # the work that faulted. (After a blocking or per-thread stream's work the legacy stream's ordering would prove
    # it did not run, the launch's mark never having landed: a proof cdsa does not use yet, issue 26.)
    legacy_copy_beside = any(op["op"] == "sync" and op["how"] == "dtoh" for op in ops) and \
        bool(launch_streams - {"null", "legacy"})
    other_work = any(op["op"] in ("memop", "copy") or (op["op"] == "sync" and op["how"] in ("htod", "memset"))
                     for op in ops) or program.get("backend") == "inject" or legacy_copy_beside
    # A launch through an entry point newer than cdsa's headers is in no record (a pass-through): never exact.
    untracked = any(op["op"] in ("launch", "burst") and op.get("api") == "thunk" for op in ops)
    if (len(launch_streams | {op["s"] for op in ops if op["op"] in ("memop", "copy")}) <= 1 and "pdl" not in f
            and not graphs and "threads_multi" not in f and "devices_multi" not in f
            and not untracked and not (other_work and truth and truth.get("code") != 710)):
        f.add("single_stream_plain")
    unknown = f - set(ALL_FEATURES)
    assert not unknown, f"features missing from ALL_FEATURES: {unknown}"
    return sorted(f)


def pdl_chain_lengths(program):
    """Lengths of the PDL groups: a launch followed on its stream by PDL launches with nothing between (other ops on
    the same stream, or a host sync of it, end a group)."""
    out = []
    cur = {}
    for op in program["ops"]:
        if op["op"] in ("launch", "burst") and op.get("api", "lk") != "thunk":
            s = op["s"]
            n = op["n"] if op["op"] == "burst" else 1
            if op.get("api") == "pdl":
                cur[s] = cur.get(s, 1) + n
            else:
                if cur.get(s, 1) > 1:
                    out.append(cur[s])
                cur[s] = 1
        elif "s" in op:
            if cur.get(op["s"], 1) > 1:
                out.append(cur[op["s"]])
            cur[op["s"]] = 1
        elif op["op"] == "sync" and op["how"] in ("ctx", "ctx_v2", "dtoh", "htod", "memset", "free"):
            pass  # a host sync puts nothing on the streams: the group goes on
    out.extend(v for v in cur.values() if v > 1)
    return out
