"""Case 13: the bad loss on a side stream while the default stream is busy with a long kernel.
Case 13d (argument "deepbind"): libcuda is dlopen'ed with RTLD_NOW | RTLD_DEEPBIND before torch loads it, so its own
stdio binds to libc first; cdsa must still capture the device's assert text (and so name the line exactly)."""
import ctypes
import os
import sys

if "deepbind" in sys.argv[1:]:
    ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOW | os.RTLD_DEEPBIND)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)
logits = torch.randn(4, 10, device="cuda")
labels = torch.tensor([3, 7, 10, 1], device="cuda")
torch.cuda.synchronize()
side = torch.cuda.Stream()
torch.cuda._sleep(int(1e9))  # the default stream spins for a while
with torch.cuda.stream(side):
    loss = F.cross_entropy(logits, labels)  # SIDE-LOSS-LINE
print("side-stream loss returned", flush=True)
print("loss", loss.item())  # the fault surfaces here (.item())
