"""The two ABI changes of CUDA 13.1 from Python through ctypes, as cuda-bindings 13.5 makes them: cuLaunchHostFunc
asked for at a version (13010, 13020: cuLaunchHostFunc_v2 with its 4th argument syncMode) and the multicast binds
(13010: a CUdevice inserted second), each bind undone by a cuMulticastUnbind that names the same device, offset and
size. argv: hostfunc|multicast VERSION. Prints the same lines as tests/e2e/programs/entry_versions.c."""
import ctypes
import sys

import simcuda as cu

case, version = sys.argv[1], int(sys.argv[2])
cu.init()
lib = cu.lib
u64, size_t = ctypes.c_uint64, ctypes.c_size_t

if case == "hostfunc":
    s = cu.stream()
    calls = []
    HostFn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    on_host = HostFn(lambda _: calls.append(1))
    addr = cu.proc_address("cuLaunchHostFunc", version)
    out = f"cuLaunchHostFunc@{version}:"
    if version >= 13010:
        fn = ctypes.CFUNCTYPE(cu.CUresult, cu.ptr, HostFn, cu.ptr, ctypes.c_uint)(addr)
        for mode in (1, 0, 7):  # CU_HOST_TASK_SPINWAIT, CU_HOST_TASK_BLOCKING, a value cuda.h does not define
            r = fn(s, on_host, None, mode)
            cu.stream_synchronize(s)
            out += f" syncMode {mode} -> {r}, ran {len(calls)};"
    else:
        fn = ctypes.CFUNCTYPE(cu.CUresult, cu.ptr, HostFn, cu.ptr)(addr)
        r = fn(s, on_host, None)
        cu.stream_synchronize(s)
        out += f" 3 arguments -> {r}, ran {len(calls)};"
    print(out)
elif case == "multicast":
    class MulticastProp(ctypes.Structure):
        _fields_ = [("numDevices", ctypes.c_uint), ("size", size_t), ("handleTypes", ctypes.c_ulonglong),
                    ("flags", ctypes.c_ulonglong)]

    class Location(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

    class AllocationProp(ctypes.Structure):  # CUmemAllocationProp_v1: 32 bytes
        _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                    ("win32HandleMetaData", ctypes.c_void_p), ("compressionType", ctypes.c_ubyte),
                    ("gpuDirectRDMACapable", ctypes.c_ubyte), ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]

    mp = MulticastProp(1, 8 << 20, 0, 0)
    g = size_t()
    cu.check("cuMulticastGetGranularity", lib.cuMulticastGetGranularity(ctypes.byref(g), ctypes.byref(mp), 0))
    g = g.value
    mc, mem = u64(), u64()
    cu.check("cuMulticastCreate", lib.cuMulticastCreate(ctypes.byref(mc), ctypes.byref(mp)))
    cu.check("cuMulticastAddDevice", lib.cuMulticastAddDevice(mc, 0))
    ap = AllocationProp(type=1, location=Location(1, 0))  # CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE
    cu.check("cuMemCreate", lib.cuMemCreate(ctypes.byref(mem), size_t(4 * g), ctypes.byref(ap), ctypes.c_ulonglong(0)))
    p = cu.alloc(g)
    bind_mem = cu.proc_address("cuMulticastBindMem", version)
    bind_addr = cu.proc_address("cuMulticastBindAddr", version)
    if version >= 13010:
        bm = ctypes.CFUNCTYPE(cu.CUresult, u64, ctypes.c_int, size_t, u64, size_t, size_t, ctypes.c_ulonglong)(bind_mem)(
            mc, 0, 2 * g, mem, g, g, 0)
        ba = ctypes.CFUNCTYPE(cu.CUresult, u64, ctypes.c_int, size_t, u64, size_t, ctypes.c_ulonglong)(bind_addr)(
            mc, 0, 3 * g, p, g, 0)
    else:
        bm = ctypes.CFUNCTYPE(cu.CUresult, u64, size_t, u64, size_t, size_t, ctypes.c_ulonglong)(bind_mem)(
            mc, 2 * g, mem, g, g, 0)
        ba = ctypes.CFUNCTYPE(cu.CUresult, u64, size_t, u64, size_t, ctypes.c_ulonglong)(bind_addr)(mc, 3 * g, p, g, 0)
    um = lib.cuMulticastUnbind(mc, 0, size_t(2 * g), size_t(g))
    ua = lib.cuMulticastUnbind(mc, 0, size_t(3 * g), size_t(g))
    print(f"cuMulticastBindMem@{version} -> {bm}, unbind -> {um}; cuMulticastBindAddr@{version} -> {ba}, unbind -> {ua}")
else:
    sys.exit(f"usage: {sys.argv[0]} hostfunc|multicast VERSION")
