#!/usr/bin/env python3
"""Seeded generator of random CUDA programs over the simulated driver, each with exactly one faulting launch (or
one piece of faulting work cdsa cannot record) known by construction (tests/oracle/README.md).

    gen.py SEED [--caps JSON] > program.json

The same seed and capabilities give the same program. Capabilities (oracle.py probes them, `probe_caps`) switch on
what the simulated driver offers beyond its base contract; a program records the ones it needs under "requires".
"""
import argparse
import json
import random
import sys

import program as P

# Which fault shape a program is built around, and how often.
FAULT_WEIGHTS = {"plain": 24, "pdl": 20, "burst": 5, "replay": 36, "unrecorded": 6, "thunk": 4}
REPLAY_WEIGHTS = {"captured": 22, "built": 12, "node_set": 16, "exec_set": 12, "exec_update": 10, "queued_change": 18,
                  "child": 10}
# Programs on one stream without PDL or graphs (the class that must be 100 % exact): what their motifs may be.
SIMPLE_MOTIFS = {"plain": 40, "burst": 8, "sync": 20, "copy": 10, "memop": 10, "host_sleep": 4, "reload": 4}
SIMPLE_FAULTS = {"plain": 70, "burst": 15, "unrecorded": 10, "thunk": 5}
MOTIF_WEIGHTS = {"plain": 26, "burst": 5, "pdl": 12, "cross": 10, "sync": 14, "copy": 6, "memop": 6, "capture": 8,
                 "build": 6, "cycles": 5, "host_sleep": 3, "reload": 2, "ctx": 2}
# Behind capabilities (drawn only where the sim has them): a fault on device 1 (devices), a fault in a created
# context (ctx_sticky: per-context sticky errors), device 1's primary context torn down and made again.
DEV1_FAULT_WEIGHT = 30
CTX_FAULT_WEIGHT = 8
DEV_RESET_WEIGHT = 8
SHORT_NAMES = ("fill", "sleep", "nll", "index", "illegal")


def pick(r, weights):
    keys = list(weights)
    return r.choices(keys, [weights[k] for k in keys])[0]


class Gen:
    def __init__(self, seed, caps=None):
        self.seed = seed
        self.caps = caps or {}
        self.r = random.Random(seed)
        self.next_grid = 1
        self.ops = []
        self.graphs = {}   # live graph name -> (thread, kinds of its top-level nodes, has_bad)
        self.execs = {}    # live exec name -> (thread, source graph, kinds, bad)
        self.n_graphs = 0
        self.n_execs = 0
        self.n_events = 0
        self.n_blocks = 0
        self.requires = set()
        self.env = {}
        self.event_devs = []  # each event's device (the context current at its cuEventCreate)
        self.per_ctx = bool(self.caps.get("ctx_sticky"))  # the per-context sim: sticky errors, handles per context
        self.dev1_faulted = False
        self.dev1_order = list(SHORT_NAMES)  # the order device 1's functions were got in (setup: the default one)
        self.dev1_launched = set()            # the kernels launched on device 1 since (their names cdsa has seen)
        self.dev1_stale = {}                  # kernel -> the other kernel whose launched function had its address
        self.move_r = random.Random(f"child_move/{seed}")  # the MOVE-ownership draws (build), apart from self.r
        self.moved = set()                    # child graphs moved into a parent (owned by it: never destroyed alone)

    # ---- small helpers
    def grid(self, n=1):
        g = self.next_grid
        self.next_grid += n
        return g

    def good_kernel(self, decoy=0.3):
        r = self.r.random()
        if r < decoy:
            return "nll"
        return self.r.choices(["fill", "sleep", "index"], [70, 18, 12])[0]

    def bad_kernel(self):
        return self.r.choices(["nll_bad", "index_bad", "illegal"], [55, 20, 25])[0]

    def kspec(self, k):
        spec = {"k": k, "grid": self.grid()}
        if k == "sleep":
            spec["us"] = self.r.choice([20, 50, 100, 300, 1000, 2000])
        return spec

    def api(self, stream):
        choices = {"lk": 60, "lkx": 10, "proc": 10, "lib": 10, "coop": 5}
        if self.backend != "inject" and stream not in ("ptsz", "pt") and self.r.random() < 0.02:
            return "thunk"  # good work cdsa cannot record: no verdict may be exact
        return pick(self.r, choices)

    def emit(self, t, op, **kw):
        d = {"op": op, "t": t}
        d.update(kw)
        self.ops.append(d)
        return d

    def launch(self, t, s, k, api=None, **kw):
        spec = self.kspec(k)
        a = api or self.api(s)
        if a == "thunk":
            self.env["SIM_CUDA_DRIVER_VERSION"] = "13990"
        return self.emit(t, "launch", s=s, api=a, **spec, **kw)

    def stream(self, t, created_only=False):
        pool = self.created[t] if created_only else self.pools[t]
        return self.r.choice(pool) if pool else None

    def other_stream(self, t, s):
        pool = [x for x in self.pools[t] if x != s]
        return self.r.choice(pool) if pool else None

    def event(self, dev=0):
        mine = [k for k, d in enumerate(self.event_devs) if d == dev]
        if mine and self.r.random() < 0.5:
            return self.r.choice(mine)
        self.event_devs.append(dev)
        self.n_events += 1
        return self.n_events - 1

    def names(self):
        """An order to get the five functions in: a freed handle's address goes to the next one made, so it decides
        which old kernel's address each new function takes (issue 26 item 6)."""
        return self.r.sample(SHORT_NAMES, len(SHORT_NAMES))

    def new_graph(self):
        self.n_graphs += 1
        return f"g{self.n_graphs - 1}"

    def new_exec(self):
        self.n_execs += 1
        return f"e{self.n_execs - 1}"

    # ---- the program's shape
    def program(self):
        r = self.r
        self.backend = r.choices(["driver", "cupti", "inject"], [68, 12, 20])[0]
        self.simple = r.random() < 0.15
        single = self.simple or r.random() < 0.2
        # What the simulated driver offers beyond its base contract, each behind its capability (oracle.py probes
        # them): no random draw is made for one it lacks, so today's programs stay what they are.
        if self.caps.get("sched_seed") and r.random() < 0.5:
            self.env["SIM_CUDA_SCHED_SEED"] = str(self.seed)
        if self.caps.get("ctx_current_after_fault"):
            self.env["SIM_CUDA_CTX_CURRENT_AFTER_FAULT"] = r.choice(["fail", "ok"])
        # Half the programs: the device's assert line names the faulting launch's last block (each launch has its
        # own grid.x, so only launches at least as large keep it in their grid: cdsa's block rule is exercised). A
        # draw of its own, so the program is otherwise the one generated without the switch.
        if self.caps.get("assert_block") and random.Random(f"assert_block/{self.seed}").random() < 0.5:
            self.env["SIM_CUDA_ASSERT_BLOCK"] = "last"
        self.devices = 1
        if self.caps.get("devices", 1) >= 2 and not single and r.random() < (0.4 if self.per_ctx else 0.3):
            self.devices = 2
            self.env["SIM_CUDA_DEVICES"] = "2"
            self.dev1_streams = r.randint(1, 2)
        nthreads = 1 if single else r.choices([1, 2, 3], [70, 22, 8])[0]
        ncreated = 0 if single else r.choice([1, 1, 2, 2, 3, 4])
        self.created = {t: [] for t in range(nthreads)}
        self.pools = {t: [] for t in range(nthreads)}
        for i in range(ncreated):
            t = 0 if i == 0 else r.randrange(nthreads)
            self.created[t].append(f"s{i}")
            self.pools[t].append(f"s{i}")
        if single:
            self.pools[0] = [r.choices(["s0", "null", "legacy", "pt", "ptsz"], [50, 20, 10, 10, 10])[0]]
            if self.pools[0][0] == "s0":
                self.created[0] = ["s0"]
                ncreated = 1
        else:
            for special, p in (("null", 0.35), ("legacy", 0.1), ("pt", 0.15), ("ptsz", 0.15)):
                if r.random() < p:
                    self.pools[0].append(special)
            for t in range(1, nthreads):
                if r.random() < 0.3 or not self.pools[t]:
                    self.pools[t].append(r.choice(["pt", "ptsz"]))
            if not self.pools[0]:
                self.pools[0].append("null")
        self.nthreads = nthreads
        self.single = single

        fault_thread = 0 if nthreads == 1 or r.random() < 0.7 else r.randrange(1, nthreads)
        # Each thread's blocks in order; the fault thread's: some before the fault block, the rest after it (those
        # are made knowing they come after the fault). Other threads' blocks may run at any time (post=True).
        seqs = {t: [] for t in range(nthreads)}
        for t in range(nthreads):
            n = r.randint(0, 5) if t == 0 else r.randint(1, 4)
            if t == fault_thread:
                before = r.randint(0, n)
                seqs[t] = [self.motif_block(t) for _ in range(before)]
                seqs[t].append(self.fault_block(t))
                seqs[t] += [self.motif_block(t, post=True) for _ in range(n - before + r.choice([0, 0, 1, 1, 2, 3]))]
            else:
                seqs[t] = [self.motif_block(t, post=True) for _ in range(n)]
        order = []
        while any(seqs.values()):
            live = [t for t in seqs if seqs[t]]
            t = r.choice(live)
            order.append(seqs[t].pop(0))
        ops = []
        for b in order:
            ops.extend(b)
        # Barriers between threads now and then (never inside a block).
        if nthreads > 1 and r.random() < 0.4:
            pos = sorted(r.sample(range(len(ops) + 1), min(2, len(ops) + 1)), reverse=True)
            for p in pos:
                ops.insert(p, {"op": "barrier", "t": 0})
        end = r.choices(["sync", "exit", "reset", "poll"], [55, 35, 4, 6])[0]
        s = self.stream(fault_thread) or "null"
        if end in ("sync", "poll"):
            last = self.sync_op(fault_thread, s) if end == "sync" else \
                {"op": "sync", "t": fault_thread, "how": "stream_query", "s": s}
            if self.devices == 2 and last["how"] in ("stream", "stream_query", "event", "event_query") and \
                    r.random() < 0.5 and not self.dev1_faulted and (last["how"].startswith("event") or s[0] == "s"):
                # Issue 26 item 5's shape: device 0's fault surfaces through its own event (recorded while its
                # context is current: an event records only on its own context's streams) or created stream while
                # device 1's context is current, with device 1 work pending.
                if last["how"].startswith("event"):
                    ops.append({"op": "record", "t": fault_thread, "s": s, "e": last["e"]})
                    last["rec"] = False
                    last.pop("s")
                ops.append({"op": "device", "t": fault_thread, "d": 1})
                if r.random() < 0.7:
                    k = r.choice(["nll", "sleep"])
                    spec = self.kspec(k)
                    if k == "sleep":
                        spec["us"] = 20000
                    ops.append({"op": "launch", "t": fault_thread, "s": f"x{r.randrange(self.dev1_streams)}",
                                "api": "lk", **spec})
            ops.append(last)
        prog = {
            "format": P.FORMAT, "version": P.VERSION, "seed": self.seed, "backend": self.backend,
            "dll": r.choice(["cdll", "pydll"]), "streams": ncreated,
            "stream_flags": [r.choice([0, 1]) for _ in range(ncreated)], "events": self.n_events,
            "blocks": self.n_blocks, "env": self.env, "requires": sorted(self.requires), "ops": ops,
        }
        if any(self.event_devs):
            prog["event_devs"] = self.event_devs
        if self.devices == 2:
            self.requires.add("devices")
        if any(op["op"] == "dev_reset" or (op["op"] == "ctx" and ("names" in op or op.get("fault"))) or
               (op["op"] == "reload" and "names" in op) for op in ops):
            self.requires.add("ctx_sticky")  # functions of their own context, freed handles reused
        if "SIM_CUDA_SCHED_SEED" in self.env:
            self.requires.add("sched_seed")
        prog["requires"] = sorted(self.requires)
        if "SIM_CUDA_SCHED_SEED" in self.env:
            # Kernel durations uniform in [0, max]: a bound that keeps the program's expected serial time under
            # about 0.4 s (a burst of 160 or 4,000 graph cycles at the default 2 ms would take seconds).
            items = sum(op.get("n", 1) if op["op"] in ("burst", "cycles") else 4 if op["op"] == "graph_launch"
                        else 1 for op in ops if op["op"] in ("launch", "burst", "cycles", "graph_launch", "ctx"))
            max_us = min(r.choice([200, 1000, 2000]), max(20, 800000 // max(1, items)))
            self.env["SIM_CUDA_SCHED_MAX_US"] = str(max_us)
        if end == "reset":
            prog["end"] = "reset"
        if self.devices == 2:
            prog["devices"] = 2
            prog["dev1_streams"] = self.dev1_streams
        return prog

    def motif_block(self, t, post=False):
        saved = self.ops
        self.ops = []
        weights = SIMPLE_MOTIFS if self.simple else MOTIF_WEIGHTS
        if self.devices == 2:
            weights = dict(weights, dev1=10)
            if self.per_ctx:
                weights = dict(weights, dev_reset=DEV_RESET_WEIGHT)
        kind = pick(self.r, weights)
        if kind == "reload" and (self.nthreads > 1 or self.graphs or self.execs):
            kind = "plain"
        # A created context's calls see the primary context's fault in this sim (one sticky error for all): only
        # before the fault, and with no other thread running meanwhile.
        if kind == "ctx" and (post or self.nthreads > 1) and not self.caps.get("ctx_sticky"):
            kind = "plain"
        getattr(self, "m_" + kind)(t)
        block, self.ops = self.ops, saved
        return block

    def fault_block(self, t):
        saved = self.ops
        self.ops = []
        weights = SIMPLE_FAULTS if self.simple else FAULT_WEIGHTS
        if not self.simple and self.devices == 2:
            weights = dict(weights, dev1=DEV1_FAULT_WEIGHT)
        if not self.simple and self.per_ctx:
            weights = dict(weights, ctx=CTX_FAULT_WEIGHT)
        kind = pick(self.r, weights)
        if kind == "unrecorded" and not self.caps.get("stream_alloc"):
            kind = "plain"
        if kind == "thunk" and self.backend == "inject":
            kind = "plain"
        getattr(self, "f_" + kind)(t)
        block, self.ops = self.ops, saved
        for op in block:
            if op.get("fault"):
                break
        else:
            raise AssertionError("fault block without its fault op")
        return block

    # ---- motifs (good work only)
    def m_plain(self, t):
        s = self.stream(t)
        for _ in range(self.r.randint(1, 5)):
            self.launch(t, s, self.good_kernel())

    def m_burst(self, t):
        s = self.stream(t)
        n = self.r.randint(5, 40) if self.r.random() < 0.8 else self.r.randint(65, 160)
        self.emit(t, "burst", s=s, k=self.r.choice(["fill", "fill", "nll"]), n=n, grid=self.grid(n), api="lk")

    def pdl_chain(self, t, s, n, bad_at=None):
        """A launch, then n PDL launches on s with nothing between; bad_at: the position (0 = the head) of a bad
        kernel, the fault op."""
        head_k = "nll" if self.r.random() < 0.5 else self.good_kernel(0.2)
        head = self.launch(t, s, self.bad_kernel() if bad_at == 0 else head_k,
                           api=self.r.choice(["lk", "lkx", "lk"]))
        if bad_at == 0:
            head["fault"] = True
        if n > 8 and (bad_at is None or bad_at == 0 or bad_at == n):
            # Long runs as one burst of PDL launches (plus the bad tail on its own).
            body = n - (1 if bad_at == n else 0)
            self.emit(t, "burst", s=s, k=self.r.choice(["fill", "fill", "nll"]), n=body, grid=self.grid(body),
                      api="pdl")
            if bad_at == n:
                self.launch(t, s, self.bad_kernel(), api="pdl", fault=True)
            return
        for j in range(1, n + 1):
            if j == bad_at:
                self.launch(t, s, self.bad_kernel(), api="pdl", fault=True)
            else:
                self.launch(t, s, self.good_kernel(0.35), api="pdl")

    def m_pdl(self, t):
        s = self.stream(t)
        self.pdl_chain(t, s, self.r.randint(1, 6) if self.r.random() < 0.7 else self.r.randint(60, 140))

    def m_cross(self, t):
        a = self.stream(t)
        b = self.other_stream(t, a) or a
        if self.r.random() < 0.6:
            self.launch(t, a, self.good_kernel())
        e = self.event()
        self.emit(t, "record", s=a, e=e)
        self.emit(t, "wait", s=b, e=e)
        if self.r.random() < 0.7:
            self.launch(t, b, self.good_kernel())

    def sync_op(self, t, s):
        how = self.r.choice(P.SYNC_KINDS)
        op = {"op": "sync", "t": t, "how": how}
        if how in ("stream", "stream_query"):
            op["s"] = s
        elif how in ("event", "event_query"):
            op["e"] = self.event()
            op["s"] = s  # the event is recorded on s first
        return op

    def m_sync(self, t):
        self.ops.append(self.sync_op(t, self.stream(t)))

    def m_copy(self, t):
        self.emit(t, "copy", s=self.stream(t), dir=self.r.choice(["htod", "dtoh", "dtod", "memset"]))

    def m_memop(self, t):
        self.emit(t, "memop", s=self.stream(t), bits=self.r.choice([32, 64]), target=self.r.choice(["host", "dev"]))

    def m_host_sleep(self, t):
        self.emit(t, "host_sleep", us=self.r.choice([100, 500, 2000]))

    def m_dev1(self, t):
        """Good work on device 1's streams, made with its primary context current (multi-device sims only)."""
        self.emit(t, "device", d=1)
        for _ in range(self.r.randint(1, 4)):
            k = self.r.choice(["fill", "sleep", "nll", "nll"])
            spec = self.kspec(k)
            if k == "sleep":
                spec["us"] = self.r.choice([1000, 20000])
            self.emit(t, "launch", s=f"x{self.r.randrange(self.dev1_streams)}", api="lk", **spec)
            self.dev1_launched.add(k)
        self.emit(t, "device", d=0)

    def m_reload(self, t):
        if self.per_ctx:
            self.emit(t, "reload", names=self.names())
        else:
            self.emit(t, "reload")

    def m_ctx(self, t):
        """A created context, its own module and functions, one good launch, destroyed (its functions freed: the
        next context's reuse their addresses)."""
        if not self.per_ctx:
            self.emit(t, "ctx", how="create_destroy", **self.kspec("fill"))
            return
        d = self.r.randrange(self.devices)
        k = self.r.choice(["fill", "fill", "nll", "index", "sleep"])
        self.emit(t, "ctx", how="create_destroy", d=d, names=self.names(), **self.kspec(k))

    def m_dev_reset(self, t):
        """Device 1's primary context reset or released (its last retain), retained again, its module, functions,
        streams and events made again: the new functions take the freed addresses under other names (issue 26
        item 6). One thread only (the others would use device 1's objects meanwhile), never after its fault (the
        teardown would take the fault with it)."""
        if self.nthreads > 1 or self.dev1_faulted:
            return self.m_dev1(t)
        names = self.names()
        # The teardown frees the functions in the order they were got and the next ones take the freed addresses
        # last-freed first (tests/sim/README.md): position q gets the address of the old order's position n-1-q.
        n = len(SHORT_NAMES)
        self.dev1_stale = {names[q]: self.dev1_order[n - 1 - q] for q in range(n)
                           if self.dev1_order[n - 1 - q] in self.dev1_launched and self.dev1_order[n - 1 - q] != names[q]}
        self.dev1_order, self.dev1_launched = names, set()
        self.emit(t, "dev_reset", d=1, how=self.r.choice(["reset", "release"]), names=names)

    def capture_body(self, to_graph, n, bad_at=None):
        body = []
        for j in range(n):
            if j == bad_at:
                body.append(self.kspec(self.bad_kernel()))
            elif not to_graph and self.r.random() < 0.12:
                body.append({"node": "memop"})
            elif self.r.random() < 0.1:
                body.append({"node": "memcpy"})
            else:
                body.append(self.kspec(self.good_kernel(0.3)))
        return body

    def capture(self, t, n=None, bad_at=None, s=None):
        s = s or self.stream(t, created_only=True)
        if s is None:
            return None, None
        to_graph = self.r.random() < 0.35
        n = n or self.r.randint(1, 4)
        g = self.new_graph()
        body = self.capture_body(to_graph, n, bad_at)
        self.emit(t, "capture", s=s, graph=g, to_graph=to_graph, mode=self.r.choice([0, 0, 1, 2]), body=body)
        self.graphs[g] = (t, ["kernel" if "k" in b else b["node"] for b in body], bad_at is not None)
        return g, body

    def build(self, t, n=None, bad_at=None, child=None):
        n = n or self.r.randint(1, 4)
        nodes = []
        for j in range(n):
            if j == bad_at:
                spec = self.kspec(self.bad_kernel())
            else:
                roll = self.r.random()
                if roll < 0.08:
                    nodes.append({"node": "empty"})
                    continue
                if roll < 0.16:
                    nodes.append({"node": "memset"})
                    continue
                spec = self.kspec(self.good_kernel(0.3))
            spec["how"] = self.r.choice(["v1", "v2", "kern", "node", "node_v2"])
            nodes.append(spec)
        if child is not None:
            at = self.r.randint(0, len(nodes))
            how = self.r.choice(["child", "node"])
            # Half the cuGraphAddNode children with CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE: the parent owns the child
            # graph itself from then on (its handle is never destroyed on its own). A draw of its own (move_r), so
            # every other choice is the one made without it.
            if how == "node" and self.move_r.random() < 0.5:
                how = "move"
                self.moved.add(child)
            nodes.insert(at, {"child": child, "how": how})
        g = self.new_graph()
        self.emit(t, "build", graph=g, nodes=nodes)
        self.graphs[g] = (t, [("kernel" if "k" in x else "child" if "child" in x else x["node"]) for x in nodes],
                          bad_at is not None)
        return g, nodes

    def instantiate(self, t, g):
        e = self.new_exec()
        self.emit(t, "instantiate", graph=g, exec=e)
        self.execs[e] = (t, g)
        return e

    def kernel_indices(self, nodes):
        return [i for i, n in enumerate(nodes) if "k" in n]

    def replays(self, t, e, n, s=None):
        for _ in range(n):
            self.emit(t, "graph_launch", exec=e, s=s or self.stream(t))

    def destroy(self, t, g, e):
        if e is not None:
            self.emit(t, "exec_destroy", exec=e)
            self.execs.pop(e, None)
        if g is not None:
            self.emit(t, "graph_destroy", graph=g)
            self.graphs.pop(g, None)

    def m_capture(self, t):
        g, body = self.capture(t)
        if g is None:
            return self.m_plain(t)
        ks = self.kernel_indices(body)
        if ks and self.r.random() < 0.25:
            self.emit(t, "node_set", graph=g, idx=self.r.choice(ks), how=self.r.choice(["v1", "v2", "node"]),
                      **self.kspec(self.good_kernel()))
        e = self.instantiate(t, g)
        self.replays(t, e, self.r.randint(1, 3))
        self.exec_changes(t, e, g, body)
        if self.r.random() < 0.7:
            self.destroy(t, g, e)

    def exec_changes(self, t, e, g, nodes):
        ks = self.kernel_indices(nodes)
        if ks and self.r.random() < 0.3:
            self.emit(t, "exec_set", exec=e, src=g, idx=self.r.choice(ks), how=self.r.choice(["v1", "v2", "node"]),
                      **self.kspec(self.good_kernel()))
            self.replays(t, e, 1)
        if ks and self.r.random() < 0.15:
            self.emit(t, "enable", exec=e, src=g, idx=self.r.choice(ks), on=self.r.choice([0, 1]))
            self.replays(t, e, 1)

    def m_build(self, t):
        child = None
        if self.r.random() < 0.25:
            child, _ = self.build(t, n=self.r.randint(1, 2))
        g, nodes = self.build(t, child=child)
        e = self.instantiate(t, g)
        self.replays(t, e, self.r.randint(1, 3))
        self.exec_changes(t, e, g, nodes)
        if self.r.random() < 0.7:
            self.destroy(t, g, e)
            if child is not None and child not in self.moved:
                self.destroy(t, child, None)

    def cycles(self, t, s, big=None):
        roll = self.r.random() if big is None else (0.9 if big else 0.0)
        n = self.r.randint(1, 40) if roll < 0.6 else self.r.randint(2048, 2300) if roll < 0.92 else \
            self.r.randint(4096, 4300)
        how = "capture" if s.startswith("s") and self.r.random() < 0.4 else "build"
        self.emit(t, "cycles", s=s, n=n, how=how, grid=self.grid())

    def m_cycles(self, t):
        self.cycles(t, self.stream(t))

    # ---- fault shapes (each emits exactly one op with "fault": true)
    def decoy(self, t, avoid):
        """A good nll (the same kernel as most culprits) on another stream, whose mark stays deferred as its tail."""
        s = self.other_stream(t, avoid)
        if s is not None:
            self.launch(t, s, "nll", api="lk")

    def f_plain(self, t):
        s = self.stream(t)
        if self.r.random() < 0.4:
            self.decoy(t, s)
        roll = self.r.random()
        if roll < 0.3:
            self.launch(t, s, self.good_kernel())
        elif roll < 0.45:
            # Issue 26 item 2's shape: a good nll, maybe a synchronous copy, many plain launches, the bad one.
            self.launch(t, s, "nll", api="lk")
            if self.r.random() < 0.5:
                self.emit(t, "sync", how="dtoh")
            n = self.r.randint(65, 130)
            self.emit(t, "burst", s=s, k="fill", n=n, grid=self.grid(n), api="lk")
        api = self.api(s)
        if api == "thunk":
            api = "lk"
        if self.r.random() < 0.15:
            api = "pdl"
        self.launch(t, s, self.bad_kernel(), api=api, fault=True)

    def f_pdl(self, t):
        s = self.stream(t)
        if self.r.random() < 0.3:
            self.decoy(t, s)
        n = self.r.randint(1, 6) if self.r.random() < 0.55 else self.r.randint(65, 140)
        where = self.r.random()
        bad_at = n if where < 0.6 else 0 if where < 0.75 else self.r.randint(1, n)
        self.pdl_chain(t, s, n, bad_at=bad_at)

    def f_burst(self, t):
        s = self.stream(t)
        n = self.r.randint(3, 40) if self.r.random() < 0.6 else self.r.randint(65, 160)
        self.emit(t, "burst", s=s, k="fill", n=n, grid=self.grid(n), api=self.r.choice(["lk", "pdl"]),
                  bad_at=self.r.randrange(n), bad=self.bad_kernel(), fault=True)

    def f_thunk(self, t):
        """A bad launch through cuLaunchKernel asked for at 13990 (newer than cdsa's headers): cdsa can only pass it
        through, so it is in no record; no launch may be named as certain."""
        pool = [x for x in self.pools[t] if x not in ("pt", "ptsz")]
        if not pool:
            return self.f_plain(t)
        s = self.r.choice(pool)
        if self.r.random() < 0.5:
            self.launch(t, s, self.good_kernel(), api="lk")
        self.launch(t, s, self.bad_kernel(), api="thunk", fault=True)

    def f_unrecorded(self, t):
        """Issue 26 item 3's shape: a launch on one stream, maybe a device-wide sync, then a memop on a block freed in
        stream order faults on another stream: work no launch record covers."""
        self.requires.add("stream_alloc")
        s = self.stream(t)
        if self.r.random() < 0.7:
            first = self.other_stream(t, s) or s
            self.launch(t, first, self.good_kernel(0.2), api="lk")
            if self.r.random() < 0.7:
                self.emit(t, "sync", how=self.r.choice(["ctx", "ctx_v2", "dtoh"]))
        block = f"a{self.n_blocks}"
        self.n_blocks += 1
        gate = self.gate_id()
        if self.nthreads == 1:
            self.emit(t, "gate", s=s, id=gate)
        else:
            self.emit(t, "launch", s=s, api="lk", k="sleep", us=20000, grid=self.grid())
        self.emit(t, "free_async", s=s, block=block)
        self.emit(t, "memop", s=s, bits=self.r.choice([32, 64]), target=block, fault=True)
        if self.nthreads == 1:
            self.emit(t, "open", id=gate)

    def f_dev1(self, t):
        """A fault on device 1 (its primary context; device 0's keeps working), surfaced there, or through its
        stream, event or cuCtxSynchronize_v2 while device 0's context is current with device 0 work pending (issue 26
        item 5, mirrored), or only at exit."""
        r = self.r
        if self.per_ctx and self.nthreads == 1 and r.random() < 0.3:
            self.m_dev1(t)  # device 1 kernels, then its primary context torn down and made again (item 6)
            self.m_dev_reset(t)
        self.dev1_faulted = True
        self.emit(t, "device", d=1)
        xs = f"x{r.randrange(self.dev1_streams)}"
        for _ in range(r.randint(0, 2)):  # device 1 work before it, maybe still running
            k = r.choice(["nll", "fill", "sleep"])
            spec = self.kspec(k)
            if k == "sleep":
                spec["us"] = r.choice([1000, 20000])
            self.emit(t, "launch", s=f"x{r.randrange(self.dev1_streams)}", api="lk", **spec)
            self.dev1_launched.add(k)
        bad = self.bad_kernel()
        stale = sorted(k for k in self.dev1_stale if k in ("nll", "index", "illegal"))
        if stale and r.random() < 0.6:
            # A kernel whose function took the address of one launched before the reset (issue 26 item 6).
            bad = {"nll": "nll_bad", "index": "index_bad", "illegal": "illegal"}[r.choice(stale)]
        self.emit(t, "launch", s=xs, api=r.choice(["lk", "lk", "lkx", "pdl"]), fault=True, **self.kspec(bad))
        how = pick(r, {"here_stream": 3, "here_ctx": 2, "other_event": 4, "other_stream": 3, "other_ctx_v2": 3,
                       "exit": 2})
        if how == "here_stream":
            self.emit(t, "sync", how=r.choice(["stream", "stream_query"]), s=xs)
        elif how == "here_ctx":
            self.emit(t, "sync", how=r.choice(["ctx", "ctx_v2", "dtoh"]))
        e = None
        if how == "other_event":
            e = self.event(dev=1)
            self.emit(t, "record", s=xs, e=e)
        self.emit(t, "device", d=0)
        if how.startswith("other") or how == "exit":
            s = self.stream(t)
            for _ in range(r.randint(0, 3)):  # device 0 work pending when the fault surfaces
                self.launch(t, s, self.good_kernel(0.5), api="lk")
        if how == "other_event":
            self.emit(t, "sync", how=r.choice(["event", "event_query"]), e=e, rec=False)
        elif how == "other_stream":
            self.emit(t, "sync", how=r.choice(["stream", "stream_query"]), s=xs)
        elif how == "other_ctx_v2":
            self.emit(t, "sync", how="ctx_v2", c=1)

    def f_ctx(self, t):
        """A fault in a created context (on device 0 or 1), often after another created context's teardown (its
        functions take the freed addresses: issue 26 item 6), surfaced in it, or through its event or
        cuCtxSynchronize_v2 with the previous context current again (item 5's shape), or never by the program."""
        r = self.r
        before = None
        if r.random() < 0.6:
            self.m_ctx(t)
            before = self.ops[-1]
        if r.random() < 0.4:
            s = self.stream(t)
            self.launch(t, s, "nll", api="lk")  # a pending decoy in the primary context, matching the assert text
        spec = self.kspec(self.bad_kernel())
        names = self.names()
        bad = spec["k"][:-4] if spec["k"].endswith("_bad") else spec["k"]
        if before is not None and before["k"] != bad and r.random() < 0.6:
            # The bad kernel's function takes the address of the one the context before launched (the sim's
            # teardown frees its functions in the order they were got, and the next ones made take the freed
            # addresses last-freed first: tests/sim/README.md): a name kept by address is another kernel's.
            names.remove(bad)
            names.insert(len(SHORT_NAMES) - 1 - before["names"].index(before["k"]), bad)
        self.emit(t, "ctx", how="create_destroy", d=r.randrange(self.devices), names=names, fault=True,
                  surface=pick(r, {"stream": 3, "ctx": 2, "ctx_v2": 3, "event": 3, "event_query": 3, "exit": 2}),
                  **spec)

    def gate_id(self):
        self.n_gates = getattr(self, "n_gates", 0) + 1
        return self.n_gates - 1

    def f_replay(self, t):
        kind = pick(self.r, REPLAY_WEIGHTS)
        if not self.created[t] and kind in ("captured", "node_set"):
            kind = "built"
        if kind == "queued_change" and self.nthreads > 1:
            kind = "exec_set"
        s = self.stream(t)
        launch_s = s if self.r.random() < 0.5 else self.stream(t)
        n = self.r.randint(1, 4)
        bad_at = self.r.randrange(n)
        if kind in ("captured", "node_set"):
            if kind == "captured":
                g, body = self.capture(t, n=n, bad_at=bad_at)
            else:
                g, body = self.capture(t, n=n)
                ks = self.kernel_indices(body)
                if not ks:
                    body[0] = self.kspec("fill")
                    self.ops[-1]["body"] = body
                    ks = [0]
                self.emit(t, "node_set", graph=g, idx=self.r.choice(ks), how=self.r.choice(["v1", "v2", "node"]),
                          **self.kspec(self.bad_kernel()))
            e = self.instantiate(t, g)
            if self.r.random() < 0.5:
                self.decoy(t, launch_s)
            self.emit(t, "graph_launch", exec=e, s=launch_s, fault=True)
        elif kind in ("built", "child"):
            child = None
            if kind == "child":
                child, _ = self.build(t, n=n, bad_at=bad_at)
                g, _ = self.build(t, n=self.r.randint(0, 2) or 1, child=child)
            else:
                g, _ = self.build(t, n=n, bad_at=bad_at)
            e = self.instantiate(t, g)
            if self.r.random() < 0.4:
                self.decoy(t, launch_s)
            self.emit(t, "graph_launch", exec=e, s=launch_s, fault=True)
        elif kind == "exec_set":
            g, nodes = (self.capture(t, n=n) if self.created[t] and self.r.random() < 0.5 else self.build(t, n=n))
            ks = self.kernel_indices(nodes)
            if not ks:
                return self.f_plain(t)
            e = self.instantiate(t, g)
            self.replays(t, e, self.r.randint(0, 2), s=launch_s)
            self.emit(t, "exec_set", exec=e, src=g, idx=self.r.choice(ks), how=self.r.choice(["v1", "v2", "node"]),
                      **self.kspec(self.bad_kernel()))
            self.emit(t, "graph_launch", exec=e, s=launch_s, fault=True)
        elif kind == "exec_update":
            g, nodes = self.build(t, n=n)
            kinds = self.graphs[g][1]
            e = self.instantiate(t, g)
            self.replays(t, e, self.r.randint(0, 2), s=launch_s)
            twin = []
            ks = [i for i, k in enumerate(kinds) if k == "kernel"]
            if not ks:
                return self.f_plain(t)
            bad = self.r.choice(ks)
            for i, k in enumerate(kinds):
                if k == "kernel":
                    spec = self.kspec(self.bad_kernel() if i == bad else self.good_kernel())
                    spec["how"] = self.r.choice(["v1", "v2", "node"])
                    twin.append(spec)
                else:
                    twin.append({"node": k})
            g2 = self.new_graph()
            self.emit(t, "build", graph=g2, nodes=twin)
            self.graphs[g2] = (t, kinds, True)
            self.emit(t, "exec_update", exec=e, graph=g2, how=self.r.choice(["v1", "v2"]))
            self.emit(t, "graph_launch", exec=e, s=launch_s, fault=True)
        else:  # queued_change: issue 26 item 4's shape
            g, nodes = self.build(t, n=n, bad_at=bad_at)
            e = self.instantiate(t, g)
            gate = self.gate_id()
            self.emit(t, "gate", s=launch_s, id=gate)
            self.emit(t, "graph_launch", exec=e, s=launch_s, fault=True)
            other = self.other_stream(t, launch_s) or launch_s
            if self.r.random() < 0.85:
                self.cycles(t, other, big=self.r.random() < 0.75)
            self.emit(t, "exec_set", exec=e, src=g, idx=bad_at, how=self.r.choice(["v1", "v2", "node"]),
                      **self.kspec(self.good_kernel()))
            self.emit(t, "open", id=gate)


def generate(seed, caps=None):
    """The program for `seed`: a valid one (exactly one fault), regenerated from derived seeds if a draw is not."""
    for attempt in range(50):
        g = Gen(seed * 1000003 + attempt if attempt else seed, caps)
        prog = g.program()
        prog["seed"] = seed
        truth = P.ground_truth(prog)
        if truth["valid"]:
            return prog
    raise RuntimeError(f"seed {seed}: no valid program in 50 draws")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seed", type=int)
    ap.add_argument("--caps", default="{}", help="capabilities as JSON (oracle.py --print-caps)")
    a = ap.parse_args()
    json.dump(generate(a.seed, json.loads(a.caps)), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
