"""Case 5: Embedding(1000, 64) fed token id 1000."""
import torch
import torch.nn as nn

torch.manual_seed(0)
emb = nn.Embedding(1000, 64).cuda()
tokens = torch.tensor([[1, 5, 1000, 7]]).cuda()
out = emb(tokens)  # EMB-LINE
print("embedding call returned", flush=True)
print("sum", out.sum().item())
