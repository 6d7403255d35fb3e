"""Graphs built node by node, from Python through ctypes (as cuda.core / cuda-python do): each mode builds a graph of
more than one kernel a different way; the second replay asserts in indexSelectSmallIndex (the first replay, or the
only one, runs good data). tests/e2e/test_graph_nodes.py checks that the report names the kernel, the replay line
(REPLAY-SITE) and the line that made or last changed its node (the mode's *-SITE marker).

graph_nodes.py MODE, MODE one of: add, add-node, set-before, exec-set, exec-update, child, clone, kern, before-update,
torch (the replay made from a file under a torch/ directory: the report's hint says how to rerun without graphs)."""
import ctypes
import os
import sys

import simcuda as cu

lib = cu.lib
ptr = ctypes.c_void_p


class KernelParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (and _v3, the same layout)."""
    _fields_ = [("func", ptr), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ptr), ("extra", ptr), ("kern", ptr), ("ctx", ptr)]


class NodeParams(ctypes.Structure):
    """CUgraphNodeParams: type, 3 reserved ints, a 232-byte union (kernel first), one reserved long long."""
    _fields_ = [("type", ctypes.c_int), ("reserved0", ctypes.c_int * 3), ("kernel", KernelParams),
                ("pad", ctypes.c_byte * (29 * 8 - ctypes.sizeof(KernelParams))), ("reserved2", ctypes.c_longlong)]


assert ctypes.sizeof(NodeParams) == 256


class UpdateResultInfo(ctypes.Structure):
    _fields_ = [("result", ctypes.c_int), ("errorNode", ptr), ("errorFromNode", ptr)]


MODE = sys.argv[1] if len(sys.argv) > 1 else "add"
ctx, mod = cu.init()
fill = cu.function(mod, "fill_f32")
index = cu.function(mod, "indexSelectSmallIndex")
s = cu.stream()
out = cu.alloc(256)
ids = cu.to_device([1, 2, 3, 0], ctypes.c_int64)
_keep = []  # argument storage the driver copies at each call; kept alive for clarity


def args_of(values):
    params = (ptr * len(values))(*[ctypes.cast(ctypes.pointer(v), ptr) for v in values])
    _keep.append((values, params))
    return ctypes.cast(params, ptr)


def fill_params():
    p = KernelParams(func=fill, gridDimX=1, gridDimY=1, gridDimZ=1, blockDimX=32, blockDimY=1, blockDimZ=1)
    p.kernelParams = args_of([ctypes.c_uint64(out), ctypes.c_int32(4), ctypes.c_float(1.0)])
    return p


def index_params(func=None, kern=None):
    p = KernelParams(gridDimX=2, gridDimY=1, gridDimZ=1, blockDimX=32, blockDimY=1, blockDimZ=1)
    p.func = func if kern is None else None
    p.kern = kern
    p.kernelParams = args_of([ctypes.c_uint64(out), ctypes.c_uint64(ids), ctypes.c_int32(4), ctypes.c_int32(100)])
    return p


def deps_of(dep):
    return (ctypes.byref(dep), 1) if dep is not None else (None, 0)


def add_kernel_node(graph, params, dep=None):
    node = ptr()
    d, n = deps_of(dep)
    cu.check("cuGraphAddKernelNode_v2", lib.cuGraphAddKernelNode_v2(ctypes.byref(node), graph, d, ctypes.c_size_t(n), ctypes.byref(params)))
    return node


def replay(exe):
    cu.check("cuGraphLaunch", lib.cuGraphLaunch(exe, s))  # REPLAY-SITE


def make_ids_bad():
    bad = (ctypes.c_int64 * 4)(1, 2, 1000, 0)
    cu.check("cuMemcpyHtoD_v2", lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ids), bad, ctypes.c_size_t(32)))


def replay_twice(exe):
    replay(exe)
    cu.stream_synchronize(s)
    print("first replay ok", flush=True)
    make_ids_bad()
    replay(exe)
    cu.stream_synchronize(s)  # SURFACE-SITE


def capture(launches):
    cu.check("cuStreamBeginCapture_v2", lib.cuStreamBeginCapture_v2(s, 0))
    for launch in launches:
        launch()
    return cu.end_capture(s)


def capture_fill():
    cu.launch(fill, [ctypes.c_uint64(out), ctypes.c_int32(4), ctypes.c_float(1.0)], stream=s)


def capture_index():
    cu.launch(index, [ctypes.c_uint64(out), ctypes.c_uint64(ids), ctypes.c_int32(4), ctypes.c_int32(100)], stream=s, grid=(2, 1, 1))  # CAPTURE-SITE


def main():
    if MODE in ("add", "torch"):
        g = cu.graph_create()
        a = add_kernel_node(g, fill_params())
        add_kernel_node(g, index_params(index), a)  # ADD-SITE
        exe = cu.instantiate(g)
        if MODE == "torch":
            sys.path.insert(0, os.environ["TORCH_SHIM_DIR"])
            from torch.cuda import graphs  # a stand-in under a torch/ directory: the replay's frames are torch's
            graphs.replay_twice(exe, replay_twice)
        else:
            replay_twice(exe)
    elif MODE == "add-node":
        g = cu.graph_create()
        a = add_kernel_node(g, fill_params())
        p = NodeParams(type=0, kernel=index_params(index))
        node = ptr()
        cu.check("cuGraphAddNode_v2", lib.cuGraphAddNode_v2(ctypes.byref(node), g, ctypes.byref(a), None, ctypes.c_size_t(1), ctypes.byref(p)))  # ADD-NODE-SITE
        replay_twice(cu.instantiate(g))
    elif MODE == "set-before":
        g = cu.graph_create()
        a = add_kernel_node(g, fill_params())
        b = add_kernel_node(g, fill_params(), a)
        cu.check("cuGraphKernelNodeSetParams_v2", lib.cuGraphKernelNodeSetParams_v2(b, ctypes.byref(index_params(index))))  # SET-SITE
        replay_twice(cu.instantiate(g))
    elif MODE == "exec-set":
        g = cu.graph_create()
        a = add_kernel_node(g, fill_params())
        b = add_kernel_node(g, fill_params(), a)
        exe = cu.instantiate(g)
        replay(exe)
        cu.stream_synchronize(s)
        print("first replay ok", flush=True)
        make_ids_bad()
        p = NodeParams(type=0, kernel=index_params(index))
        cu.check("cuGraphExecNodeSetParams", lib.cuGraphExecNodeSetParams(exe, b, ctypes.byref(p)))  # EXEC-SET-SITE
        replay(exe)
        cu.stream_synchronize(s)
    elif MODE == "exec-update":
        g = cu.graph_create()
        a = add_kernel_node(g, fill_params())
        add_kernel_node(g, fill_params(), a)
        exe = cu.instantiate(g)
        replay(exe)
        cu.stream_synchronize(s)
        print("first replay ok", flush=True)
        new = capture([capture_fill, capture_index])
        info = UpdateResultInfo()
        cu.check("cuGraphExecUpdate_v2", lib.cuGraphExecUpdate_v2(exe, new, ctypes.byref(info)))  # UPDATE-SITE
        make_ids_bad()
        replay(exe)
        cu.stream_synchronize(s)
    elif MODE == "child":
        child = cu.graph_create()
        cu.begin_capture_to_graph(s, child)
        capture_index()
        cu.end_capture(s)
        parent = cu.graph_create()
        a = add_kernel_node(parent, fill_params())
        node = ptr()
        cu.check("cuGraphAddChildGraphNode", lib.cuGraphAddChildGraphNode(ctypes.byref(node), parent, ctypes.byref(a), ctypes.c_size_t(1), child))  # CHILD-SITE
        replay_twice(cu.instantiate(parent))
    elif MODE == "clone":
        g = cu.graph_create()
        a = add_kernel_node(g, fill_params())
        add_kernel_node(g, index_params(index), a)  # CLONE-SITE
        copy = ptr()
        cu.check("cuGraphClone", lib.cuGraphClone(ctypes.byref(copy), g))
        cu.check("cuGraphDestroy", lib.cuGraphDestroy(g))
        replay_twice(cu.instantiate(copy))
    elif MODE == "kern":
        kern = cu.library_kernel("indexSelectSmallIndex")
        g = cu.graph_create()
        a = add_kernel_node(g, fill_params())
        add_kernel_node(g, index_params(kern=kern), a)  # KERN-SITE
        replay_twice(cu.instantiate(g))
    elif MODE == "before-update":
        g = cu.graph_create()
        bad = cu.function(mod, "illegal_address")
        p = KernelParams(func=bad, gridDimX=1, gridDimY=1, gridDimZ=1, blockDimX=1, blockDimY=1, blockDimZ=1)
        node = add_kernel_node(g, p)  # BAD-NODE-SITE
        exe = cu.instantiate(g)
        cu.launch(cu.function(mod, "sleep_us"), [ctypes.c_int64(300000)], stream=s)
        replay(exe)
        cu.check("cuGraphExecKernelNodeSetParams_v2", lib.cuGraphExecKernelNodeSetParams_v2(exe, node, ctypes.byref(fill_params())))  # LATER-UPDATE-SITE
        cu.stream_synchronize(s)
    else:
        sys.exit(f"unknown mode {MODE}")


main()
