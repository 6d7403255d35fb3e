"""Case 23e: the bad loss, then the program exits without synchronizing or reading the loss: the fault only
shows at exit (after cudart's and torch's own atexit handlers may have torn the context down)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(64, 10).cuda()
loss = nn.CrossEntropyLoss()(model(torch.randn(4, 64).cuda()), torch.tensor([3, 7, 10, 1]).cuda())  # LOSS-LINE
print("exiting without a synchronize", flush=True)
