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
                "kernel": KERNEL_NAMES.get(op.get("k"), "")}
    i, j, k, grid = bad[0]
    op = program["ops"][i]
    return {"valid": True, "kind": "replay" if op["op"] == "graph_launch" else "launch", "op": i, "sub": j,
            "grid": grid, "code": FAULT_CODE[k], "kernel": KERNEL_NAMES[k], "skipped": m.skipped}


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


def features(program, truth=None):
    truth = truth or ground_truth(program)
    ops = program["ops"]
    kinds = [op["op"] for op in ops]
    f = set()
    f.add("backend_" + program.get("backend", "driver"))
    launch_streams = {op["s"] for op in ops if op["op"] in ("launch", "burst", "graph_launch", "cycles")}
    launch_streams = {s for s in launch_streams if not s.startswith("x")} | (
        {"x"} if any(s.startswith("x") for s in launch_streams) else set())
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
        if any(op["op"] == "device" and op.get("d") == 1 for op in ops[(fault_op_index(program) or 0):]):
            f.add("surface_other_device")
    for var, feat in (("SIM_CUDA_SCHED_SEED", "sim_sched_seed"),
                      ("SIM_CUDA_CTX_CURRENT_AFTER_FAULT", "sim_ctx_after_fault")):
        if var in program.get("env", {}):
            f.add(feat)
    if "record" in kinds or "wait" in kinds:
        f.add("events")
    if "wait" in kinds:
        f.add("cross_stream_wait")
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
            f.add("module_reload")
        elif op["op"] == "ctx":
            f.add("ctx_teardown")
        elif op["op"] == "free_async":
            f.add("stream_ordered_free")
        if op["op"] in ("launch", "burst"):
            api = op.get("api", "lk")
            if api == "pdl":
                f.add("pdl")
            elif api != "lk":
                f.add("api_" + api)
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
    if fault is not None:
        after = ops[fault + 1:]
        if not any(op["op"] == "sync" for op in after):
            f.add("surface_exit")
        if program.get("end") == "reset":
            f.add("surface_teardown")
    if truth.get("valid"):
        f.add("fault_" + (truth.get("what") if truth["kind"] == "unrecorded" else truth["kind"]))
        if truth["kind"] != "unrecorded":
            f.add("fault_" + {700: "700", 710: "710"}[truth["code"]])
    graphs = {"capture", "build", "cycles", "graph_launch"} & set(kinds)
    if (len(launch_streams | {op["s"] for op in ops if op["op"] in ("memop", "copy")}) <= 1 and "pdl" not in f
            and not graphs and "threads_multi" not in f):
        f.add("single_stream_plain")
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
