"""A graph re-captured (cuStreamBeginRecaptureToGraph, CUDA 13.3): captured with two fills, then re-captured with a
fill and the nll with bad labels, node for node, then instantiated and replayed: the replay asserts in the
re-captured nll.

graph_recapture.py: the recapture succeeds.
graph_recapture.py fail: the recapture captures one node too many and fails (the graph "in an undefined state";
the simulated driver leaves the nodes it replaced), and a replay of it asserts in a node cdsa cannot name."""
import ctypes
import sys

import simcuda as cu

FAIL = sys.argv[1:2] == ["fail"]
lib = cu.lib
ctx, mod = cu.init()
fill = cu.function(mod, "fill_f32")
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
s = cu.stream()
buf, out = cu.alloc(64), cu.alloc(4)
labels = cu.to_device([3, 7, 10, 1], ctypes.c_int64)  # label 10 of 10 classes: the device asserts
cu.synchronize()

graph = cu.graph_create()
cu.begin_capture_to_graph(s, graph)
cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(1)], stream=s)  # FIRST-CAPTURE-A
cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(2)], stream=s)  # FIRST-CAPTURE-B
assert cu.end_capture(s).value == graph.value

cu.check("cuStreamBeginRecaptureToGraph", lib.cuStreamBeginRecaptureToGraph(s, 0, graph, None, None))
cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(3)], stream=s)  # RECAPTURE-FILL
cu.launch(nll, cu.nll_args(out, labels, 4, 10), stream=s)  # RECAPTURE-NLL
if FAIL:
    cu.launch(fill, [ctypes.c_uint64(buf), ctypes.c_int32(16), ctypes.c_float(4)], stream=s)  # one node too many
    end = ctypes.c_void_p()
    r = lib.cuStreamEndCapture(s, ctypes.byref(end))
    print("recapture failed", r, flush=True)
    exe = cu.instantiate(graph)
else:
    assert cu.end_capture(s).value == graph.value
    print("recaptured", flush=True)
    exe = cu.instantiate(graph)
cu.graph_launch(exe, s)  # LAUNCH-SITE
cu.stream_synchronize(s)  # SURFACE-SITE
