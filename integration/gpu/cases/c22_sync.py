"""Case 22: the bad loss of case 1, surfaced at torch.cuda.synchronize() (cudaDeviceSynchronize, which CUDA 13
cudart calls as cuCtxSynchronize_v2): cdsa's report must come before torch's exception, not at exit."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(64, 10).cuda()
logits = model(torch.randn(4, 64).cuda())
labels = torch.tensor([3, 7, 10, 1]).cuda()
loss = nn.CrossEntropyLoss()(logits, labels)  # LOSS-LINE
print("loss call returned", flush=True)
torch.cuda.synchronize()  # SYNC-LINE
print("synchronize returned?")
