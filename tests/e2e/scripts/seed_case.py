"""The seed's real-hardware table (../shared/seed), one row per run, over the simulated driver.

Each row runs as a fresh process, as in the seed: a "Linear(64, 10)" stand-in fills the logits, then the loss
kernel (or the embedding's index_select) runs on the labels of that row, and `loss.item()` (a synchronous copy
back) is where CUDA reports the fault. Usage: seed_case.py ROW
"""
import ctypes
import sys

import simcuda as cu

cu.as_pytorch()  # the seed's programs are PyTorch's
ctx, mod = cu.init()
fill = cu.function(mod, "fill_f32")
nll = cu.function(mod, "nll_loss_forward_reduce_cuda_kernel_2d")
index_select = cu.function(mod, "indexSelectSmallIndex")
NUM_CLASSES = 10


def linear(batch, value=0.25):
    """The classifier's logits: batch x NUM_CLASSES floats."""
    logits = cu.alloc(4 * batch * NUM_CLASSES)
    cu.launch(fill, [ctypes.c_uint64(logits), ctypes.c_int32(batch * NUM_CLASSES), ctypes.c_float(value)])
    return logits


def log_softmax(logits, batch):
    out = cu.alloc(4 * batch * NUM_CLASSES)
    cu.launch(fill, [ctypes.c_uint64(out), ctypes.c_int32(batch * NUM_CLASSES), ctypes.c_float(-2.3)])
    return out


def cross_entropy(logits, labels, ignore_index=-100):
    loss = cu.alloc(4)
    target = cu.to_device(labels, ctypes.c_int64)
    cu.launch(nll, cu.nll_args(loss, target, len(labels), NUM_CLASSES, ignore_index))  # LOSS-LAUNCH
    return loss


def nll_loss(log_probs, labels):
    loss = cu.alloc(4)
    target = cu.to_device(labels, ctypes.c_int64)
    cu.launch(nll, cu.nll_args(loss, target, len(labels), NUM_CLASSES))  # NLL-LAUNCH
    return loss


def embedding(token_ids, num_embeddings=1000):
    out = cu.alloc(4 * 64 * len(token_ids))
    ids = cu.to_device(token_ids, ctypes.c_int64)
    args = [ctypes.c_uint64(out), ctypes.c_uint64(ids), ctypes.c_int32(len(token_ids)), ctypes.c_int32(num_embeddings)]
    cu.launch(index_select, args)  # EMBEDDING-LAUNCH
    return out


def item(d):
    return cu.from_device(d, 1, ctypes.c_float)[0]  # ITEM-SITE


row = sys.argv[1]
if row == "labels_3_7_10_1":
    loss = cross_entropy(linear(4), [3, 7, 10, 1])
    print("loss call returned", flush=True)
    print("loss", item(loss))
elif row == "label_minus_1":
    loss = cross_entropy(linear(4), [3, -1, 9, 1])
    print("loss call returned", flush=True)
    print("loss", item(loss))
elif row == "nll_on_log_softmax":
    loss = nll_loss(log_softmax(linear(4), 4), [3, 7, 10, 1])
    print("loss call returned", flush=True)
    print("loss", item(loss))
elif row == "embedding_id_1000":
    out = embedding([12, 45, 1000, 7])
    print("embedding call returned", flush=True)
    print("out", item(out))
elif row == "op_after_catching":
    loss = cross_entropy(linear(4), [3, 7, 10, 1])
    try:
        item(loss)
    except cu.CudaError as e:
        print("caught", e.name, flush=True)
    try:
        cu.alloc(4)  # torch.zeros(1, device="cuda") after catching  # AFTER-CATCH
        print("later op ran", flush=True)
    except cu.CudaError as e:
        print("later op failed", e.name, flush=True)
elif row == "inf_nan_logits":
    logits = linear(2, float("inf"))
    cu.launch(fill, [ctypes.c_uint64(logits), ctypes.c_int32(1), ctypes.c_float(float("nan"))])
    loss = cross_entropy(logits, [1, 2])
    print("loss", item(loss))
elif row == "ignore_index_255":
    loss = cross_entropy(linear(4), [3, 255, 9, 1], ignore_index=255)
    print("loss", item(loss))
elif row == "float_labels":
    # The dtype check runs on the host before any kernel: an ordinary error, not a device assert.
    raise RuntimeError("\"nll_loss_forward_reduce_cuda_kernel_2d_index\" not implemented for 'Double'")
else:
    sys.exit(f"unknown row {row}")
