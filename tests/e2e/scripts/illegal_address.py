"""A kernel that faults with an illegal address (700)."""
import simcuda as cu

ctx, mod = cu.init()
bad = cu.function(mod, "illegal_address")


def step():
    cu.launch(bad, [])  # LAUNCH-SITE


step()
cu.synchronize()  # SURFACE-SITE
