"""GPU suite case 29b (issue 27, info): how cudart 13.5 reaches the driver for its 13.1-13.5 functions, under cdsa
with CDSA_DEBUG_ENTRY_POINTS (the suite reads the log): cudaLaunchHostFunc_v2 (a host call with syncMode 0),
cudaStreamBeginRecaptureToGraph (a capture of one host call, then a recapture of the same into that graph) and
cudaGraphNodeGetParams (of the captured node). Prints "cudart V PATH" and one "call NAME rc R" line each; a runtime
older than a function prints "call NAME missing". Uses the cudart of the PyPI wheel (nvidia/cu13/lib) if the Python
has one, else the toolkit's (CUDA_HOME/lib64)."""
import ctypes
import glob
import os
import sys

paths = [p for e in sys.path for p in glob.glob(os.path.join(e or ".", "nvidia/cu13/lib/libcudart.so.13"))]
paths.append(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64", "libcudart.so.13"))
path = next(p for p in paths if os.path.exists(p))
rt = ctypes.CDLL(path)
v = ctypes.c_int()
rt.cudaRuntimeGetVersion(ctypes.byref(v))
print(f"cudart {v.value} {path}", flush=True)
HostFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
calls = []
on_host = HostFn(lambda _: calls.append(1))


def call(name, *args):
    fn = getattr(rt, name, None)
    if fn is None:
        print(f"call {name} missing", flush=True)
        return None
    r = fn(*args)
    print(f"call {name} rc {r}", flush=True)
    return r


n = ctypes.c_int()
call("cudaGetDeviceCount", ctypes.byref(n))
s = ctypes.c_void_p()
call("cudaStreamCreate", ctypes.byref(s))
call("cudaLaunchHostFunc_v2", s, on_host, None, ctypes.c_uint(0))
call("cudaStreamSynchronize", s)
print(f"host calls {len(calls)}", flush=True)
graph = ctypes.c_void_p()
call("cudaStreamBeginCapture", s, 0)  # cudaStreamCaptureModeGlobal
call("cudaLaunchHostFunc", s, on_host, None)
call("cudaStreamEndCapture", s, ctypes.byref(graph))
nodes = (ctypes.c_void_p * 4)()
count = ctypes.c_size_t(4)
call("cudaGraphGetNodes", graph, nodes, ctypes.byref(count))
params = (ctypes.c_ubyte * 256)()  # cudaGraphNodeParams: 256 bytes
if count.value:
    call("cudaGraphNodeGetParams", ctypes.c_void_p(nodes[0]), params)
call("cudaStreamBeginRecaptureToGraph", s, 0, graph, None)
call("cudaLaunchHostFunc", s, on_host, None)
call("cudaStreamEndCapture", s, ctypes.byref(graph))
call("cudaStreamSynchronize", s)
