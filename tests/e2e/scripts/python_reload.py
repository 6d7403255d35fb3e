"""importlib.reload of a module whose launching function moved (issue 26): the module is written, imported and run
(good launches from line 2), then written again with the launch two lines lower, reloaded, and run with a bad kernel:
the fault's launch must show the new file's line, not the old version's (its code objects are freed by the reload,
and the allocator may hand their memory to the new ones). argv: DIR, where the module is written."""
import ctypes
import importlib
import pathlib
import sys

import simcuda as cu

ctx, mod = cu.init()
fill = cu.function(mod, "fill_f32")
bad = cu.function(mod, "illegal_address")
buf = cu.alloc(256)

OLD = '''def step(cu, k, args):
    cu.launch(k, args)  # OLD-SITE
'''
# The same bytecode two lines lower (comments only): the new code object is the old one's size, so the allocator
# is likely to put it where the old one was.
NEW = '''def step(cu, k, args):
    # moved
    # down
    cu.launch(k, args)  # NEW-SITE
'''

d = pathlib.Path(sys.argv[1])
(d / "reloaded_step.py").write_text(OLD)
sys.path.insert(0, str(d))
import reloaded_step  # noqa: E402

for i in range(3):
    reloaded_step.step(cu, fill, [ctypes.c_uint64(buf), ctypes.c_int32(64), ctypes.c_float(i)])
cu.synchronize()
(d / "reloaded_step.py").write_text(NEW)
importlib.invalidate_caches()
importlib.reload(reloaded_step)
reloaded_step.step(cu, bad, [])
cu.synchronize()  # SURFACE-SITE
