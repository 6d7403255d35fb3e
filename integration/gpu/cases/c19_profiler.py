"""Case 19: torch.profiler with CUDA activity: the profiler must still record GPU kernels under cdsa."""
import torch
from torch.profiler import ProfilerActivity, profile

x = torch.randn(512, 512, device="cuda")
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        x = torch.relu(x @ x) / 512
    torch.cuda.synchronize()
kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print("cuda kernel events:", len(kernels))
