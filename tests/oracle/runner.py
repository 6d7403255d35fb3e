#!/usr/bin/env python3
"""The oracle's Python runner: executes one program (tests/oracle/README.md) against libcuda.so.1 through ctypes,
as runner.cc does in C++; one op list, two front ends.

    runner.py PROGRAM.json

Environment: ORACLE_RESULT (where to write what the program saw: per-thread launches, errors, the sticky error),
ORACLE_SUPPORT (liboracle_support.so: the gate), ORACLE_DLL=cdll|pydll (overrides the program's "dll"),
ORACLE_LIBCDSA and ORACLE_FAKE_CUPTI (backend "inject": libcdsa.so loaded as the driver loads an injection library,
and the fake libcupti whose callbacks this runner plays CUPTI's part through; backend "cupti": the fake's
cuLaunchKernel). Exit status: 1 when a call returned a sticky fault, else 0.
"""
import ctypes
import json
import os
import sys
import threading
import time

c = ctypes
ptr = c.c_void_p
STICKY = {700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 226, 911}
SOFT = set(range(900, 910)) | {910}  # capture interference from another thread; an exec update the driver refused
NOT_READY = 600
STREAM_LEGACY, STREAM_PER_THREAD = 1, 2
PDL_ATTR = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
CB = {"lk": (307, 442), "lkx": (652, 653), "coop": (477, 478), "graph": (514, 515)}  # CUPTI driver cbids
# Stream capture's CUPTI driver cbids (the runner calls the non-_ptsz names) and their parameter structs.
CB_CAPTURE = {"begin": 539, "to_graph": 720, "end": 497}
# The teardowns, with their enter callbacks as CUPTI makes them (parameter blocks: the context or the device).
CB_TEARDOWN = {"cuCtxDestroy_v2": 322, "cuDevicePrimaryCtxRelease_v2": 544, "cuDevicePrimaryCtxReset_v2": 545}
# The parameter blocks CUPTI hands a callback (generated_cuda_meta.h's <name>_params: the arguments in order, laid out
# as a C struct's members, as ctypes lays out a Structure), for the runner's calls on a stream; by its name alone
# cdsa knows a synchronous copy's work, and a work call without its block is work it cannot place (call_work).
U64, SZ = c.c_uint64, c.c_size_t
PROTOS = {"cuMemcpyHtoDAsync_v2": [U64, ptr, SZ, ptr], "cuMemcpyDtoHAsync_v2": [ptr, U64, SZ, ptr],
          "cuMemcpyDtoDAsync_v2": [U64, U64, SZ, ptr], "cuMemsetD8Async": [U64, c.c_ubyte, SZ, ptr],
          "cuStreamWriteValue32_v2": [ptr, U64, c.c_uint32, c.c_uint],
          "cuStreamWriteValue64_v2": [ptr, U64, U64, c.c_uint], "cuMemFreeAsync": [U64, ptr],
          "cuMemAllocAsync": [ptr, SZ, ptr], "cuLaunchHostFunc": [ptr, ptr, ptr], "cuEventRecord": [ptr, ptr],
          "cuStreamWaitEvent": [ptr, ptr, c.c_uint], "cuStreamSynchronize": [ptr], "cuStreamQuery": [ptr],
          "cuCtxSynchronize_v2": [ptr], "cuStreamDestroy_v2": [ptr]}
BLOCKS = {name: type(name + "_params", (c.Structure,), {"_fields_": [(f"a{k}", t) for k, t in enumerate(types)]})
          for name, types in PROTOS.items()}


def param_block(name, args):
    """The call's parameter block as CUPTI would hand it over, or None for a call PROTOS lacks. An argument passed
    by reference goes in as 0: cdsa reads only the stream and context arguments."""
    block = BLOCKS.get(name[:-5] if name.endswith("_ptsz") else name)
    if block is None or len(args) != len(block._fields_):
        return None
    values = []
    for a in args:
        v = getattr(a, "value", a)
        values.append(v if isinstance(v, int) or v is None else 0)
    return block(*values)


class CaptureParams(c.Structure):
    _fields_ = [("h", c.c_void_p), ("mode", c.c_int)]


class CaptureToGraphParams(c.Structure):
    _fields_ = [("h", c.c_void_p), ("g", c.c_void_p), ("deps", c.c_void_p), ("data", c.c_void_p),
                ("n", c.c_size_t), ("mode", c.c_int)]


class EndCaptureParams(c.Structure):
    _fields_ = [("h", c.c_void_p), ("out", c.c_void_p)]


NODE_KERNEL, NODE_GRAPH = 0, 4  # CUgraphNodeType


class LaunchParams(c.Structure):  # cuLaunchKernel_params (CUPTI)
    _fields_ = [("f", ptr)] + [(n, c.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "shmem")] + [
        ("stream", ptr), ("params", ptr), ("extra", ptr)]


class CoopParams(c.Structure):  # cuLaunchCooperativeKernel_params
    _fields_ = [("f", ptr)] + [(n, c.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "shmem")] + [
        ("stream", ptr), ("params", ptr)]


class Attr(c.Structure):  # CUlaunchAttribute
    _fields_ = [("id", c.c_int), ("pad", c.c_char * 4), ("value", c.c_int), ("rest", c.c_char * 60)]


class Config(c.Structure):  # CUlaunchConfig
    _fields_ = [(n, c.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "shmem")] + [
        ("stream", ptr), ("attrs", c.POINTER(Attr)), ("nattrs", c.c_uint)]


class ExParams(c.Structure):  # cuLaunchKernelEx_params
    _fields_ = [("config", c.POINTER(Config)), ("f", ptr), ("params", ptr), ("extra", ptr)]


class GraphLaunchParams(c.Structure):  # cuGraphLaunch_params
    _fields_ = [("exec", ptr), ("stream", ptr)]


class KNode1(c.Structure):  # CUDA_KERNEL_NODE_PARAMS_v1
    _fields_ = [("func", ptr)] + [(n, c.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "shmem")] + [
        ("params", ptr), ("extra", ptr)]


class KNode2(c.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2 / _v3
    _fields_ = KNode1._fields_ + [("kern", ptr), ("ctx", ptr)]


class ChildParams(c.Structure):  # CUDA_CHILD_GRAPH_NODE_PARAMS
    _fields_ = [("graph", ptr), ("ownership", c.c_int)]


class NodeUnion(c.Union):
    _fields_ = [("reserved", c.c_longlong * 29), ("kernel", KNode2), ("graph", ChildParams)]


class NodeParams(c.Structure):  # CUgraphNodeParams
    _fields_ = [("type", c.c_int), ("reserved0", c.c_int * 3), ("u", NodeUnion), ("reserved2", c.c_longlong)]


class MemsetParams(c.Structure):  # CUDA_MEMSET_NODE_PARAMS_v1
    _fields_ = [("dst", c.c_uint64), ("pitch", c.c_size_t), ("value", c.c_uint), ("elementSize", c.c_uint),
                ("width", c.c_size_t), ("height", c.c_size_t)]


class UpdateInfo(c.Structure):  # CUgraphExecUpdateResultInfo
    _fields_ = [("result", c.c_int), ("errorNode", ptr), ("errorFromNode", ptr)]


assert c.sizeof(NodeParams) == 256 and c.sizeof(Attr) == 72


class Sticky(Exception):
    def __init__(self, call, code):
        super().__init__(f"CUDA error: {call} returned {code}")
        self.code = code


class OpFailed(Exception):
    pass


class Runner:
    def __init__(self, prog):
        self.prog = prog
        self.backend = prog.get("backend", "driver")
        dll = os.environ.get("ORACLE_DLL") or prog.get("dll", "cdll")
        self.lib = (c.PyDLL if dll == "pydll" else c.CDLL)("libcuda.so.1")
        self.support = c.CDLL(os.environ["ORACLE_SUPPORT"])
        self.gate_fn = c.cast(self.support.oracle_gate_wait, ptr)
        self.emit = None
        self.fake_launch = None
        self.lock = threading.Lock()
        self.result = {"runner": "py", "dll": dll, "tids": {}, "launches": {}, "errors": [], "soft": [],
                       "skipped": [], "sticky": 0, "sticky_op": None, "sticky_call": None, "fault_launched": False,
                       "done": False}
        self.graphs = {}   # name -> (handle, generation)
        self.execs = {}    # name -> (handle, source graph generation)
        self.generation = 0
        self.freed = set()
        self.keep = []     # ctypes objects a call's arguments point into

    # ---- calls
    def call(self, i, name, *args, cbid=None, params=None, fn=None):
        f = fn or getattr(self.lib, name)
        if self.emit and cbid is None:
            params = param_block(name, args)
        block = c.byref(params) if self.emit and params is not None else None
        if self.emit:
            self.emit(cbid or 0, 0, name.encode(), self.sym_name if cbid is not None else None, block, 0)
        r = f(*args)
        if self.emit:
            self.emit(cbid or 0, 1, name.encode(), self.sym_name if cbid is not None else None, block, r)
        return self.check(i, name, r)

    def teardown(self, i, name, handle):
        """A context teardown, with CUPTI's enter and exit callbacks (backend inject); i None: the end's reset,
        whose answer is not checked."""
        block = handle if isinstance(handle, c._SimpleCData) else ptr(handle)
        if self.emit:
            self.emit(CB_TEARDOWN[name], 0, name.encode(), None, c.byref(block), 0)
        r = getattr(self.lib, name)(handle)
        if self.emit:
            self.emit(CB_TEARDOWN[name], 1, name.encode(), None, c.byref(block), r)
        return r if i is None else self.check(i, name, r)

    def check(self, i, name, r):
        if r == 0:
            return 0
        if r in STICKY or (r == 4 and self.prog.get("end") == "reset"):
            with self.lock:
                if not self.result["sticky"]:
                    self.result.update(sticky=r, sticky_op=i, sticky_call=name)
            raise Sticky(name, r)
        entry = {"op": i, "call": name, "code": r}
        with self.lock:
            (self.result["soft"] if r in SOFT else self.result["errors"]).append(entry)
        raise OpFailed(name)

    def log(self, t, i, grid, kind):
        self.result["launches"].setdefault(str(t), []).append([i, grid, kind])

    # ---- setup
    def setup(self):
        L = self.lib
        self.check(-1, "cuInit", L.cuInit(0))
        if self.backend == "inject":
            self.cdsa = c.CDLL(os.environ["ORACLE_LIBCDSA"])
            self.cdsa.InitializeInjection()
        if self.backend in ("inject", "cupti"):
            fake = c.CDLL(os.environ["ORACLE_FAKE_CUPTI"])
            if self.backend == "inject":
                self.emit = fake.fake_cupti_emit
                self.emit.argtypes = [c.c_uint, c.c_int, c.c_char_p, c.c_char_p, ptr, c.c_int]
            else:
                self.fake_launch = fake.cuLaunchKernel
        self.sym_name = None
        self.local = threading.local()  # .cur: the context this thread made current (the runner's bookkeeping)
        dev = c.c_int()
        self.call(-1, "cuDeviceGet", c.byref(dev), 0)
        self.devs = [dev.value]
        self.ctx = ptr()
        self.call(-1, "cuDevicePrimaryCtxRetain", c.byref(self.ctx), dev)
        self.set_current(-1, self.ctx)
        self.load_modules(self.prog.get("names"))
        self.out = self.alloc(4096)
        self.fillbuf = self.alloc(256)
        self.scratch = self.alloc(4096)
        self.labels = {False: self.upload([3, 7, 1, 0]), True: self.upload([3, 7, 10, 1])}
        self.index = {False: self.upload([1, 2, 3, 0]), True: self.upload([1, 2, 1000, 4])}
        # The uploads are synchronous copies on the NULL stream, which may still run when they return: the program
        # starts from a synchronized context, so that cdsa has a fact showing they did not fault (README, Ground truth).
        self.call(-1, "cuCtxSynchronize")
        self.support.oracle_host_memory.restype = ptr
        mem = self.support.oracle_host_memory()  # static: queued work may outlive this runner's objects
        self.host = (c.c_uint64 * 512).from_address(mem)
        self.host_copy = (c.c_uint8 * 4096).from_address(mem + 4096)
        self.call(-1, "cuMemHostRegister_v2", self.host, c.c_size_t(c.sizeof(self.host)), 0)
        self.streams = []
        for flags in self.prog.get("stream_flags", [0] * self.prog.get("streams", 0)):
            s = ptr()
            self.call(-1, "cuStreamCreate", c.byref(s), flags)
            self.streams.append(s)
        # Events belong to the context current at cuEventCreate: "event_devs" says each one's device (default 0).
        self.event_devs = self.prog.get("event_devs", [0] * self.prog.get("events", 0))
        self.events = [ptr() for _ in self.event_devs]
        for k, d in enumerate(self.event_devs):
            if d == 0:
                self.call(-1, "cuEventCreate", c.byref(self.events[k]), 0)
        self.ctxs = [self.ctx]
        self.dev1 = []
        if self.prog.get("devices", 1) > 1:  # device 1's primary context, its module, buffers, streams, events
            dev1, ctx1 = c.c_int(), ptr()
            self.call(-1, "cuDeviceGet", c.byref(dev1), 1)
            self.call(-1, "cuDevicePrimaryCtxRetain", c.byref(ctx1), dev1)
            self.devs.append(dev1.value)
            self.ctxs.append(ctx1)
            self.set_current(-1, ctx1)
            self.fillbuf1 = self.alloc(256)
            self.out1 = self.alloc(64)
            self.labels1 = self.upload([3, 7, 1, 0])
            self.call(-1, "cuCtxSynchronize")
            self.make_dev1_objects(-1, self.prog.get("dev1_names"))
            self.set_current(-1, self.ctx)
        self.blocks = {}
        for k in range(self.prog.get("blocks", 0)):
            d = c.c_uint64()
            self.call(-1, "cuMemAllocAsync", c.byref(d), c.c_size_t(64), None)
            self.blocks[f"a{k}"] = d.value

    NAMES = {"fill": b"fill_f32", "sleep": b"sleep_us", "nll": b"nll_loss_forward_reduce_cuda_kernel_2d",
             "index": b"indexSelectSmallIndex", "illegal": b"illegal_address"}

    @classmethod
    def name_order(cls, order):
        """The order functions are got in (a list of short names, default all five): the sim hands a freed handle's
        address to the next one made (tests/sim/README.md), so it decides which old name each new address had."""
        order = list(order or [])
        return order + [n for n in cls.NAMES if n not in order]

    def set_current(self, i, ctx):
        self.call(i, "cuCtxSetCurrent", ctx)
        self.local.cur = ctx

    def get_functions(self, i, mod, order):
        out = {}
        for short in self.name_order(order):
            f = ptr()
            self.call(i, "cuModuleGetFunction", c.byref(f), mod, self.NAMES[short])
            out[short] = f
        return out

    def load_modules(self, order=None):
        self.mod = ptr()
        self.call(-1, "cuModuleLoadData", c.byref(self.mod), b"image")
        self.lib_handle = ptr()
        self.call(-1, "cuLibraryLoadData", c.byref(self.lib_handle), b"fatbin", None, None, 0, None, None, 0)
        self.funcs = self.get_functions(-1, self.mod, order)
        self.kernels = {}
        for short in self.name_order(order):
            k = ptr()
            self.call(-1, "cuLibraryGetKernel", c.byref(k), self.lib_handle, self.NAMES[short])
            self.kernels[short] = k
        self.names = dict(self.NAMES)

    def make_dev1_objects(self, i, names):
        """Device 1's module, functions (in `names` order), streams and events, made with its primary context
        current (at setup, and again after its reset or last release)."""
        mod1 = ptr()
        self.call(i, "cuModuleLoadData", c.byref(mod1), b"image")
        self.funcs1 = self.get_functions(i, mod1, names)
        self.dev1 = []
        for _ in range(self.prog.get("dev1_streams", 1)):
            s = ptr()
            self.call(i, "cuStreamCreate", c.byref(s), 0)
            self.dev1.append(s)
        for k, d in enumerate(self.event_devs):
            if d == 1:
                self.events[k] = ptr()
                self.call(i, "cuEventCreate", c.byref(self.events[k]), 0)

    def alloc(self, n):
        d = c.c_uint64()
        self.call(-1, "cuMemAlloc_v2", c.byref(d), c.c_size_t(n))
        return d.value

    def upload(self, values):
        arr = (c.c_int64 * len(values))(*values)
        d = self.alloc(c.sizeof(arr))
        self.call(-1, "cuMemcpyHtoD_v2", c.c_uint64(d), arr, c.c_size_t(c.sizeof(arr)))
        return d

    # ---- streams and kernels
    def stream(self, ref):
        """(handle, ptsz): ptsz means the _ptsz entry point (NULL there is the per-thread stream). The handle is a
        c_void_p (a structure field takes its .value)."""
        if ref == "null":
            return ptr(None), False
        if ref == "legacy":
            return ptr(STREAM_LEGACY), False
        if ref == "pt":
            return ptr(STREAM_PER_THREAD), False
        if ref == "ptsz":
            return ptr(None), True
        if ref.startswith("x"):
            return self.dev1[int(ref[1:])], False
        return self.streams[int(ref[1:])], False

    def sname(self, base, ptsz):
        return base + "_ptsz" if ptsz else base

    def base(self, k):
        return k[:-4] if k.endswith("_bad") else k

    def args(self, spec):
        k = spec["k"]
        if k == "fill":
            vals = [c.c_uint64(self.fillbuf1 if spec.get("dev") else self.fillbuf), c.c_int32(16), c.c_float(1.0)]
        elif k == "sleep":
            vals = [c.c_int64(spec.get("us", 100))]
        elif k in ("nll", "nll_bad"):
            out, labels = (self.out1, self.labels1) if spec.get("dev") else (self.out, self.labels[False])
            if k == "nll_bad":  # memory is one address space: device 1's bad labels are device 0's
                labels = self.labels[True]
            vals = [c.c_uint64(out), c.c_uint64(labels), c.c_int32(4), c.c_int32(10), c.c_int64(-100)]
        elif k in ("index", "index_bad"):
            vals = [c.c_uint64(self.out + 1024), c.c_uint64(self.index[k == "index_bad"]), c.c_int32(4),
                    c.c_int32(1000)]
        else:
            vals = []
        arr = (ptr * max(1, len(vals)))(*[c.cast(c.pointer(v), ptr) for v in vals])
        self.keep = [vals, arr]
        return arr if vals else None

    def launch(self, t, i, spec, sref, api):
        k, grid = spec["k"], spec["grid"]
        base = self.base(k)
        f = self.kernels[base] if api == "lib" else self.funcs[base]
        if sref.startswith("x"):  # device 1: its own module's function, its own buffer
            f = self.funcs1[base]
            spec = dict(spec, dev=1)
        params = self.args(spec)
        h, ptsz = self.stream(sref)
        self.sym_name = self.names[base]
        if api in ("lk", "lib"):
            name = self.sname("cuLaunchKernel", ptsz)
            fn = self.fake_launch if (self.backend == "cupti" and not ptsz and api == "lk") else None
            lp = LaunchParams(f.value, grid, 1, 1, 32, 1, 1, 0, h.value, c.cast(params, ptr) if params else None, None)
            self.call(i, name, f, grid, 1, 1, 32, 1, 1, 0, h, params, None, cbid=CB["lk"][ptsz], params=lp, fn=fn)
        elif api in ("lkx", "pdl"):
            attrs = (Attr * 1)()
            attrs[0].id, attrs[0].value = PDL_ATTR, 1
            cfg = Config(grid, 1, 1, 32, 1, 1, 0, h.value, attrs if api == "pdl" else None, 1 if api == "pdl" else 0)
            ep = ExParams(c.pointer(cfg), f.value, c.cast(params, ptr) if params else None, None)
            self.keep.append((attrs, cfg))
            self.call(i, self.sname("cuLaunchKernelEx", ptsz), c.byref(cfg), f, params, None, cbid=CB["lkx"][ptsz],
                      params=ep)
        elif api == "coop":
            cp = CoopParams(f.value, grid, 1, 1, 32, 1, 1, 0, h.value, c.cast(params, ptr) if params else None)
            self.call(i, self.sname("cuLaunchCooperativeKernel", ptsz), f, grid, 1, 1, 32, 1, 1, 0, h, params,
                      cbid=CB["coop"][ptsz], params=cp)
        elif api == "proc":
            fn = self.proc("cuLaunchKernel", 12000, 2 if ptsz else 0, 11)
            lp = LaunchParams(f.value, grid, 1, 1, 32, 1, 1, 0, h.value, c.cast(params, ptr) if params else None, None)
            self.call(i, self.sname("cuLaunchKernel", ptsz), f, grid, 1, 1, 32, 1, 1, 0, h, params, None,
                      cbid=CB["lk"][ptsz], params=lp, fn=fn)
        elif api == "thunk":
            fn = self.proc("cuLaunchKernel", 13990, 0, 12)
            self.call(i, "cuLaunchKernel@13990", f, grid, 1, 1, 32, 1, 1, 0, h, params, None, 13990, fn=fn)
            return  # cdsa can only pass it through: in no record
        else:
            raise ValueError(api)
        self.log(t, i, grid, "k")

    def proc(self, name, version, flags, nargs):
        fn, status = ptr(), c.c_int()
        self.call(-1, "cuGetProcAddress_v2", name.encode(), c.byref(fn), version, c.c_uint64(flags), c.byref(status))
        types = [ptr] + [c.c_uint] * 7 + [ptr, ptr, ptr] + ([c.c_uint] if nargs == 12 else [])
        return c.CFUNCTYPE(c.c_int, *types)(fn.value)

    def graph_launch(self, t, i, exe, sref):
        h, ptsz = self.stream(sref)
        self.sym_name = None
        gp = GraphLaunchParams(exe.value, h.value)
        self.call(i, self.sname("cuGraphLaunch", ptsz), exe, h, cbid=CB["graph"][ptsz], params=gp)
        self.log(t, i, 0, "g")

    # ---- the ops
    def run_op(self, t, i, op):
        getattr(self, "op_" + op["op"])(t, i, op)

    def op_launch(self, t, i, op):
        self.launch(t, i, op, op["s"], op.get("api", "lk"))
        if op.get("fault"):
            self.result["fault_launched"] = True

    def op_burst(self, t, i, op):
        for j in range(op["n"]):
            bad = j == op.get("bad_at", -1)
            spec = {"k": op["bad"] if bad else op["k"], "grid": op["grid"] + j}
            self.launch(t, i, spec, op["s"], op.get("api", "lk"))
            if bad:
                self.result["fault_launched"] = True

    def op_record(self, t, i, op):
        h, ptsz = self.stream(op["s"])
        self.call(i, self.sname("cuEventRecord", ptsz), self.events[op["e"]], h)

    def op_wait(self, t, i, op):
        h, ptsz = self.stream(op["s"])
        self.call(i, self.sname("cuStreamWaitEvent", ptsz), h, self.events[op["e"]], 0)

    def poll(self, i, name, fn, *args):
        deadline = time.monotonic() + 5
        while True:
            r = fn(*args)
            if self.emit:
                self.emit(0, 1, name.encode(), None, None, r)
            if r != NOT_READY:
                return self.check(i, name, r)
            if time.monotonic() > deadline:
                return 0
            time.sleep(0.0002)

    def op_sync(self, t, i, op):
        how = op["how"]
        L = self.lib
        if how == "ctx":
            self.call(i, "cuCtxSynchronize")
        elif how == "ctx_v2":
            fn = c.CFUNCTYPE(c.c_int, ptr)(self.proc_any("cuCtxSynchronize", 13000))
            self.call(i, "cuCtxSynchronize_v2", self.ctxs[op["c"]] if "c" in op else None, fn=fn)
        elif how in ("stream", "stream_query"):
            h, ptsz = self.stream(op["s"])
            if how == "stream":
                self.call(i, self.sname("cuStreamSynchronize", ptsz), h)
            else:
                name = self.sname("cuStreamQuery", ptsz)
                self.poll(i, name, getattr(L, name), h)
        elif how in ("event", "event_query"):
            h, ptsz = self.stream(op["s"]) if "s" in op else (None, False)
            ev = self.events[op["e"]]
            if op.get("rec", True):  # else recorded by an earlier op (maybe with another context current)
                self.call(i, self.sname("cuEventRecord", ptsz), ev, h)
            if how == "event":
                self.call(i, "cuEventSynchronize", ev)
            else:
                self.poll(i, "cuEventQuery", L.cuEventQuery, ev)
        elif how == "dtoh":
            self.call(i, "cuMemcpyDtoH_v2", self.host_copy, c.c_uint64(self.scratch), c.c_size_t(64))
        elif how == "htod":
            self.call(i, "cuMemcpyHtoD_v2", c.c_uint64(self.scratch), self.host_copy, c.c_size_t(64))
        elif how == "memset":
            self.call(i, "cuMemsetD8_v2", c.c_uint64(self.scratch + 64), 0, c.c_size_t(64))
        elif how == "free":
            d = self.alloc_op(i, 64)
            self.call(i, "cuMemFree_v2", c.c_uint64(d))

    def alloc_op(self, i, n):
        d = c.c_uint64()
        self.call(i, "cuMemAlloc_v2", c.byref(d), c.c_size_t(n))
        return d.value

    def proc_any(self, name, version):
        fn, status = ptr(), c.c_int()
        self.call(-1, "cuGetProcAddress_v2", name.encode(), c.byref(fn), version, c.c_uint64(0), c.byref(status))
        return fn.value

    def op_copy(self, t, i, op):
        h, ptsz = self.stream(op["s"])
        d = op["dir"]
        if d == "htod":
            self.call(i, self.sname("cuMemcpyHtoDAsync_v2", ptsz), c.c_uint64(self.scratch + 256), self.host_copy,
                      c.c_size_t(64), h)
        elif d == "dtoh":
            self.call(i, self.sname("cuMemcpyDtoHAsync_v2", ptsz), c.byref(self.host_copy, 256),
                      c.c_uint64(self.scratch + 512), c.c_size_t(64), h)
        elif d == "dtod":
            self.call(i, self.sname("cuMemcpyDtoDAsync_v2", ptsz), c.c_uint64(self.scratch + 1024),
                      c.c_uint64(self.scratch + 2048), c.c_size_t(64), h)
        else:
            self.call(i, self.sname("cuMemsetD8Async", ptsz), c.c_uint64(self.scratch + 3072), 7, c.c_size_t(64), h)

    def memop(self, i, sref, bits, target, slot):
        h, ptsz = self.stream(sref)
        if target == "host":
            addr = c.addressof(self.host) + 8 * (slot % 512)
        elif target == "dev":
            addr = self.scratch + 8 * (slot % 512)
        else:
            addr = self.blocks[target]
        name = self.sname(f"cuStreamWriteValue{bits}_v2", ptsz)
        self.call(i, name, h, c.c_uint64(addr), (c.c_uint64 if bits == 64 else c.c_uint32)(slot + 1), 0)

    def op_memop(self, t, i, op):
        self.memop(i, op["s"], op.get("bits", 32), op.get("target", "host"), i)
        if op.get("fault"):
            self.result["fault_launched"] = True

    def op_free_async(self, t, i, op):
        if op["block"] in self.freed or op["block"] not in self.blocks:
            return self.skip(i)
        h, ptsz = self.stream(op["s"])
        self.call(i, self.sname("cuMemFreeAsync", ptsz), c.c_uint64(self.blocks[op["block"]]), h)
        self.freed.add(op["block"])

    def op_gate(self, t, i, op):
        h, ptsz = self.stream(op["s"])
        self.call(i, self.sname("cuLaunchHostFunc", ptsz), h, self.gate_fn, ptr(op["id"]))

    def op_device(self, t, i, op):
        self.set_current(i, self.ctxs[op["d"]])

    def op_dev_reset(self, t, i, op):
        """Device d's primary context torn down (cuDevicePrimaryCtxReset_v2, or cuDevicePrimaryCtxRelease_v2 of the
        setup's one retain), retained again (a new incarnation, the same handle), its objects made again."""
        prev = self.local.cur
        d = op.get("d", 1)
        if op.get("how", "reset") == "release":
            self.teardown(i, "cuDevicePrimaryCtxRelease_v2", self.devs[d])
        else:
            self.teardown(i, "cuDevicePrimaryCtxReset_v2", self.devs[d])
        ctx = ptr()
        self.call(i, "cuDevicePrimaryCtxRetain", c.byref(ctx), self.devs[d])
        self.ctxs[d] = ctx
        self.set_current(i, ctx)
        self.make_dev1_objects(i, op.get("names"))
        self.set_current(i, prev)  # the primary context's handle is the same across resets

    def op_open(self, t, i, op):
        self.support.oracle_gate_open(op["id"])

    def op_host_sleep(self, t, i, op):
        time.sleep(op["us"] / 1e6)

    def op_barrier(self, t, i, op):
        try:
            self.barrier.wait(timeout=10)
        except threading.BrokenBarrierError:
            pass

    def op_reload(self, t, i, op):
        self.call(i, "cuModuleUnload", self.mod)
        self.call(i, "cuLibraryUnload", self.lib_handle)
        self.load_modules(op.get("names"))

    def op_ctx(self, t, i, op):
        """A created context on device d with its own module and functions (in `names` order), a stream and one
        launch of k in it; good work is synchronized and torn down, the fault surfaced as `surface` says (runner.cc's
        op_ctx)."""
        prev = self.local.cur
        ctx2, s, m2 = ptr(), ptr(), ptr()
        self.call(i, "cuCtxCreate_v2", c.byref(ctx2), 0, self.devs[op.get("d", 0)])
        self.local.cur = ctx2
        self.call(i, "cuModuleLoadData", c.byref(m2), b"image")
        f2 = self.get_functions(i, m2, op.get("names"))
        self.call(i, "cuStreamCreate", c.byref(s), 0)
        k = op.get("k", "fill")
        f = f2[self.base(k)]
        params = self.args(op)
        lp = LaunchParams(f.value, op["grid"], 1, 1, 32, 1, 1, 0, s.value, c.cast(params, ptr) if params else None,
                          None)
        self.sym_name = self.names[self.base(k)]
        self.call(i, "cuLaunchKernel", f, op["grid"], 1, 1, 32, 1, 1, 0, s, params, None, cbid=CB["lk"][0],
                  params=lp, fn=self.fake_launch if self.backend == "cupti" else None)
        self.log(t, i, op["grid"], "k")
        if not op.get("fault"):
            self.call(i, "cuStreamSynchronize", s)
            self.call(i, "cuStreamDestroy_v2", s)
            self.teardown(i, "cuCtxDestroy_v2", ctx2)  # pops it: answers the one under it
            self.set_current(i, prev)
            return
        self.result["fault_launched"] = True
        how = op.get("surface", "stream")
        if how == "stream":
            self.call(i, "cuStreamSynchronize", s)
        elif how == "ctx":
            self.call(i, "cuCtxSynchronize")
        elif how == "ctx_v2":
            self.set_current(i, prev)
            fn = c.CFUNCTYPE(c.c_int, ptr)(self.proc_any("cuCtxSynchronize", 13000))
            self.call(i, "cuCtxSynchronize_v2", ctx2, fn=fn)
        elif how in ("event", "event_query"):
            ev = ptr()
            self.call(i, "cuEventCreate", c.byref(ev), 0)
            self.call(i, "cuEventRecord", ev, s)
            self.set_current(i, prev)
            if how == "event":
                self.call(i, "cuEventSynchronize", ev)
            else:
                self.poll(i, "cuEventQuery", self.lib.cuEventQuery, ev)
        else:
            self.set_current(i, prev)

    # ---- graphs
    def node_params1(self, spec):
        base = self.base(spec["k"])
        params = self.args(spec)
        p = KNode1(self.funcs[base].value, spec["grid"], 1, 1, 32, 1, 1, 0, c.cast(params, ptr) if params else None,
                   None)
        self.keep.append(p)
        return p

    def node_params2(self, spec, kern=False):
        base = self.base(spec["k"])
        params = self.args(spec)
        p = KNode2(None if kern else self.funcs[base].value, spec["grid"], 1, 1, 32, 1, 1, 0,
                   c.cast(params, ptr) if params else None, None, self.kernels[base].value if kern else None, None)
        self.keep.append(p)
        return p

    def node_params(self, spec):
        np_ = NodeParams()
        np_.type = NODE_KERNEL
        np_.u.kernel = self.node_params2(spec)
        self.keep.append(np_)
        return np_

    def new_graph(self, name, handle):
        self.generation += 1
        self.graphs[name] = (handle, self.generation)

    def op_capture(self, t, i, op):
        if op["graph"] in self.graphs:
            return self.skip(i)
        h, ptsz = self.stream(op["s"])
        g = ptr()
        if op.get("to_graph"):
            self.call(i, "cuGraphCreate", c.byref(g), 0)
            p = CaptureToGraphParams(h, g, None, None, 0, op.get("mode", 0))
            self.call(i, "cuStreamBeginCaptureToGraph", h, g, None, None, c.c_size_t(0), op.get("mode", 0),
                      cbid=CB_CAPTURE["to_graph"], params=p)
        else:
            self.begin_capture(i, h, op.get("mode", 0))
        try:
            for item in op["body"]:
                if "k" in item:
                    self.launch(t, i, item, op["s"], "lk")
                elif item["node"] == "memop":
                    self.memop(i, op["s"], 32, "host", 500)
                else:
                    self.call(i, "cuMemcpyDtoDAsync_v2", c.c_uint64(self.scratch + 1024),
                              c.c_uint64(self.scratch + 2048), c.c_size_t(64), h)
        finally:
            out = ptr()
            r = self.end_capture(h, out)
        self.check(i, "cuStreamEndCapture", r)
        self.new_graph(op["graph"], out)

    def begin_capture(self, i, h, mode):
        self.call(i, "cuStreamBeginCapture_v2", h, mode, cbid=CB_CAPTURE["begin"], params=CaptureParams(h, mode))

    def end_capture(self, h, out):
        """cuStreamEndCapture with its CUPTI callbacks; the caller checks the result."""
        p = EndCaptureParams(h, c.addressof(out))
        if self.emit:
            self.emit(CB_CAPTURE["end"], 0, b"cuStreamEndCapture", None, c.byref(p), 0)
        r = self.lib.cuStreamEndCapture(h, c.byref(out))
        if self.emit:
            self.emit(CB_CAPTURE["end"], 1, b"cuStreamEndCapture", None, c.byref(p), r)
        return r

    def add_kernel_node(self, i, g, dep, spec):
        n = ptr()
        deps = (ptr * 1)(dep) if dep else None
        nd = 1 if dep else 0
        how = spec.get("how", "v2")
        if how == "v1":
            self.call(i, "cuGraphAddKernelNode", c.byref(n), g, deps, c.c_size_t(nd), c.byref(self.node_params1(spec)))
        elif how in ("v2", "kern"):
            self.call(i, "cuGraphAddKernelNode_v2", c.byref(n), g, deps, c.c_size_t(nd),
                      c.byref(self.node_params2(spec, kern=how == "kern")))
        elif how == "node":
            self.call(i, "cuGraphAddNode", c.byref(n), g, deps, c.c_size_t(nd), c.byref(self.node_params(spec)))
        else:
            self.call(i, "cuGraphAddNode_v2", c.byref(n), g, deps, None, c.c_size_t(nd),
                      c.byref(self.node_params(spec)))
        return n

    def op_build(self, t, i, op):
        if op["graph"] in self.graphs:
            return self.skip(i)
        g = ptr()
        self.call(i, "cuGraphCreate", c.byref(g), 0)
        self.new_graph(op["graph"], g)
        dep = None
        for item in op["nodes"]:
            deps = (ptr * 1)(dep) if dep else None
            nd = c.c_size_t(1 if dep else 0)
            if "k" in item:
                n = self.add_kernel_node(i, g, dep, item)
            elif "child" in item:
                if item["child"] not in self.graphs:
                    continue
                child = self.graphs[item["child"]][0]
                n = ptr()
                if item.get("how") in ("node", "move"):
                    np_ = NodeParams()
                    np_.type = NODE_GRAPH
                    move = item["how"] == "move"  # CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE (1): the parent owns it now
                    np_.u.graph = ChildParams(child.value, 1 if move else 0)
                    self.call(i, "cuGraphAddNode", c.byref(n), g, deps, nd, c.byref(np_))
                    if move:
                        self.graphs.pop(item["child"])  # destroyed with its parent, never on its own
                else:
                    self.call(i, "cuGraphAddChildGraphNode", c.byref(n), g, deps, nd, child)
            elif item["node"] == "empty":
                n = ptr()
                self.call(i, "cuGraphAddEmptyNode", c.byref(n), g, deps, nd)
            else:  # memset
                n = ptr()
                mp = MemsetParams(self.scratch + 3584, 0, 0, 1, 64, 1)
                self.call(i, "cuGraphAddMemsetNode", c.byref(n), g, deps, nd, c.byref(mp), self.ctx)
            dep = n

    def graph_node(self, i, g, idx):
        """Node idx of graph g (cuGraphGetNodes, creation order), if it is a kernel node."""
        count = c.c_size_t(0)
        self.call(i, "cuGraphGetNodes", g, None, c.byref(count))
        if idx >= count.value:
            return None
        nodes = (ptr * count.value)()
        self.call(i, "cuGraphGetNodes", g, nodes, c.byref(count))
        kind = c.c_int()
        self.call(i, "cuGraphNodeGetType", ptr(nodes[idx]), c.byref(kind))
        return ptr(nodes[idx]) if kind.value == NODE_KERNEL else None

    def op_node_set(self, t, i, op):
        if op["graph"] not in self.graphs:
            return self.skip(i)
        n = self.graph_node(i, self.graphs[op["graph"]][0], op["idx"])
        if n is None:
            return self.skip(i)
        how = op.get("how", "v2")
        if how == "v1":
            self.call(i, "cuGraphKernelNodeSetParams", n, c.byref(self.node_params1(op)))
        elif how == "v2":
            self.call(i, "cuGraphKernelNodeSetParams_v2", n, c.byref(self.node_params2(op)))
        else:
            self.call(i, "cuGraphNodeSetParams", n, c.byref(self.node_params(op)))

    def op_instantiate(self, t, i, op):
        if op["graph"] not in self.graphs or op["exec"] in self.execs:
            return self.skip(i)
        g, gen = self.graphs[op["graph"]]
        e = ptr()
        self.call(i, "cuGraphInstantiateWithFlags", c.byref(e), g, c.c_ulonglong(0))
        self.execs[op["exec"]] = (e, gen)

    def exec_node(self, i, op):
        if op["exec"] not in self.execs or op["src"] not in self.graphs:
            return None, None
        e, gen = self.execs[op["exec"]]
        g, ggen = self.graphs[op["src"]]
        if gen != ggen:
            return None, None
        return e, self.graph_node(i, g, op["idx"])

    def op_exec_set(self, t, i, op):
        e, n = self.exec_node(i, op)
        if n is None:
            return self.skip(i)
        how = op.get("how", "v2")
        if how == "v1":
            self.call(i, "cuGraphExecKernelNodeSetParams", e, n, c.byref(self.node_params1(op)))
        elif how == "v2":
            self.call(i, "cuGraphExecKernelNodeSetParams_v2", e, n, c.byref(self.node_params2(op)))
        else:
            self.call(i, "cuGraphExecNodeSetParams", e, n, c.byref(self.node_params(op)))

    def op_enable(self, t, i, op):
        e, n = self.exec_node(i, op)
        if n is None:
            return self.skip(i)
        self.call(i, "cuGraphNodeSetEnabled", e, n, int(op["on"]))

    def op_exec_update(self, t, i, op):
        if op["exec"] not in self.execs or op["graph"] not in self.graphs:
            return self.skip(i)
        e = self.execs[op["exec"]][0]
        g = self.graphs[op["graph"]][0]
        if op.get("how") == "v1":
            err, res = ptr(), c.c_int()
            self.call(i, "cuGraphExecUpdate", e, g, c.byref(err), c.byref(res))
        else:
            info = UpdateInfo()
            self.call(i, "cuGraphExecUpdate_v2", e, g, c.byref(info))

    def op_graph_launch(self, t, i, op):
        if op["exec"] not in self.execs:
            return self.skip(i)
        self.graph_launch(t, i, self.execs[op["exec"]][0], op["s"])
        if op.get("fault"):
            self.result["fault_launched"] = True

    def op_graph_destroy(self, t, i, op):
        if op["graph"] not in self.graphs:
            return self.skip(i)
        g = self.graphs.pop(op["graph"])[0]
        self.call(i, "cuGraphDestroy", g)

    def op_exec_destroy(self, t, i, op):
        if op["exec"] not in self.execs:
            return self.skip(i)
        e = self.execs.pop(op["exec"])[0]
        self.call(i, "cuGraphExecDestroy", e)

    def op_cycles(self, t, i, op):
        h, ptsz = self.stream(op["s"])
        spec = {"k": "fill", "grid": op["grid"], "how": "v2"}
        for _ in range(op["n"]):
            g, e = ptr(), ptr()
            if op.get("how") == "capture":
                self.begin_capture(i, h, 1)
                try:
                    self.launch(t, i, spec, op["s"], "lk")
                finally:
                    r = self.end_capture(h, g)
                self.check(i, "cuStreamEndCapture", r)
            else:
                self.call(i, "cuGraphCreate", c.byref(g), 0)
                self.add_kernel_node(i, g, None, spec)
            self.call(i, "cuGraphInstantiateWithFlags", c.byref(e), g, c.c_ulonglong(0))
            self.graph_launch(t, i, e, op["s"])
            self.call(i, "cuGraphExecDestroy", e)
            self.call(i, "cuGraphDestroy", g)

    def skip(self, i):
        self.result["skipped"].append(i)

    # ---- threads
    def thread_main(self, t, ops):
        self.result["tids"][str(t)] = threading.get_native_id()
        if t:
            try:
                self.set_current(-1, self.ctx)
            except Sticky:
                if self.barrier:
                    self.barrier.abort()
                raise
        for i, op in ops:
            try:
                self.run_op(t, i, op)
            except OpFailed:
                continue
            except Sticky:
                if self.barrier:
                    self.barrier.abort()
                raise
        return None

    def run(self):
        ops = self.prog["ops"]
        nthreads = 1 + max([op.get("t", 0) for op in ops] + [0])
        per = {t: [] for t in range(nthreads)}
        for i, op in enumerate(ops):
            if op["op"] == "barrier":
                for t in per:
                    per[t].append((i, op))
            else:
                per[op.get("t", 0)].append((i, op))
        self.barrier = threading.Barrier(nthreads) if nthreads > 1 else None
        errors = []

        def body(t):
            try:
                self.thread_main(t, per[t])
            except Sticky as e:
                errors.append(e)

        threads = [threading.Thread(target=body, args=(t,)) for t in range(1, nthreads)]
        for th in threads:
            th.start()
        try:
            self.thread_main(0, per[0])
        except Sticky as e:
            errors.append(e)
        for th in threads:
            th.join()
        self.support.oracle_gate_open_all()
        if not errors and self.prog.get("end") == "reset":
            self.teardown(None, "cuDevicePrimaryCtxReset_v2", c.c_int(0))
        self.result["done"] = True
        return errors


def main():
    prog = json.load(open(sys.argv[1]))
    r = Runner(prog)
    errors = []
    try:
        r.setup()
        errors = r.run()
    except Sticky as e:
        errors = [e]
    finally:
        r.support.oracle_gate_open_all()
        path = os.environ.get("ORACLE_RESULT")
        if path:
            with open(path, "w") as f:
                json.dump(r.result, f)
    if errors:
        raise errors[0]  # the program ends on the fault as a Python program would: a traceback, status 1


if __name__ == "__main__":
    main()
