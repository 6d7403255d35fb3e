"""Case 26: a torch.distributed job on one GPU (NCCL backend, world size 1, TORCH_NCCL_ASYNC_ERROR_HANDLING as
default) whose step asserts before an all-reduce. The fault surfaces on the main thread (loss.item()) or in
ProcessGroupNCCL's watchdog thread polling the collective's end event, which then tears the process down: cdsa's
report must be out, whole, before torch's and NCCL's own error lines, naming the step's line."""
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(port))
os.environ.setdefault("NCCL_DEBUG", "WARN")  # NCCL's own error lines, so the suite can see they come after
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
torch.manual_seed(0)
model = nn.Linear(64, 10).cuda()
dist.all_reduce(torch.ones(1, device="cuda"))  # a first collective that works
torch.cuda.synchronize()
print("collectives ready", flush=True)
logits = model(torch.randn(4, 64).cuda())
loss = nn.CrossEntropyLoss()(logits, torch.tensor([3, 7, 10, 1]).cuda())  # STEP-LINE
dist.all_reduce(loss)
print("loss", loss.item(), flush=True)
dist.destroy_process_group()
