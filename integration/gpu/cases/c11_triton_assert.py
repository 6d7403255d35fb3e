"""Case 11 (Triton): a Triton kernel whose tl.device_assert fails (debug mode on)."""
import torch
import triton
import triton.language as tl


@triton.jit(debug=True)
def check_range(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.device_assert(x < 100, "value out of range")


x = torch.arange(64, device="cuda", dtype=torch.int32)
x[5] = 1000
check_range[(1,)](x, 64, BLOCK=64)  # TRITON-CALL
print("triton launch returned", flush=True)
print("sum", x.sum().item())  # the fault surfaces here (.item())
