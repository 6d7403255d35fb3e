"""The seed's embedding case: token id 1000 in a table of 1000 rows."""
import ctypes

import simcuda as cu

ctx, mod = cu.init()
index_select = cu.function(mod, "indexSelectSmallIndex")
out = cu.alloc(4 * 64)
ids = cu.to_device([12, 45, 1000, 7], ctypes.c_int64)


def embed():
    cu.launch(index_select, [ctypes.c_uint64(out), ctypes.c_uint64(ids), ctypes.c_int32(4), ctypes.c_int32(1000)])  # LAUNCH-SITE


embed()
cu.synchronize()  # SURFACE-SITE
