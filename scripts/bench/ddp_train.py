"""ddp_train.py - the PyTorch DDP peer of `dtrain bench train --workers R`: the Keras tutorial CNN
(config/models/fmnist_cnn.json: Conv2D(32,3,relu) -> MaxPool(2) -> Flatten -> Dense(64,relu) ->
Dense(10)) trained with DistributedDataParallel on the gloo backend, on Fashion-MNIST.

  python3 ddp_train.py --rank I --world R --master ADDR:PORT [--steps N] [--warmup W]
                       [--global-batch 64] [--threads 1] [--iface IFACE] [--data DIR]
                       [--compression none|bf16|f16] [--json]

One process per rank, started by the caller (scripts/bench/train-vs-ddp.sh puts each on its own
netns host, or all on loopback). The global batch is split evenly across ranks (64 / R each); rank r
reads its contiguous share of each global batch of the training set (no shuffle), as DATA sharding
does; only the images the run reads are decoded. Adam (lr 0.001), cross-entropy on logits, one
intra-op thread per rank. Images are decoded once into a uint8 tensor; each step converts its
share to float / 255 (that cost is part of a step, as a data pipeline's is). After W warm-up steps and a barrier, N steps are timed; step_s is the
slowest rank's mean step, samples_per_s = global batch / step_s. Rank 0 prints
{"world_size", "batch", "samples_per_s", "step_s", "loss", "torch", "compression"} with --json,
else a line. --compression f16 registers torch's fp16_compress_hook (gradient buckets
all-reduced as float16), the peer of dtrain's $.strategy.compression; bf16 is refused with the
reason (torch's bf16_compress_hook needs NCCL, and gloo cannot reduce bfloat16), so a bf16 run
of dtrain is compared with DDP's f16 hook, which puts the same bytes on the wire.
"""
import argparse
import datetime
import gzip
import json
import os
import sys
import time

import numpy as np


def read_idx(path, limit):
    """The first `limit` records of a gzipped IDX file of bytes (only that much is inflated)."""
    with gzip.open(path, "rb") as f:
        head = f.read(4)
        magic = int.from_bytes(head, "big") if len(head) == 4 else 0
        ndim = magic & 0xFF
        if magic >> 8 != 0x08 or ndim not in (1, 3):
            raise SystemExit("ddp_train: %s is not an IDX file of bytes (magic 0x%08x)" % (path, magic))
        dims = [int.from_bytes(f.read(4), "big") for _ in range(ndim)]
        dims[0] = min(dims[0], limit)
        want = int(np.prod(dims))
        data = f.read(want)
    if len(data) != want:
        raise SystemExit("ddp_train: %s: %d bytes of data for shape %s" % (path, len(data), dims))
    return np.frombuffer(data, dtype=np.uint8).reshape(dims)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="ADDR:PORT of rank 0's TCP store")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iface", help="GLOO_SOCKET_IFNAME: the interface gloo's pairs use")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--timeout", type=float, default=120, help="seconds for rendezvous and each call")
    p.add_argument("--compression", choices=("none", "bf16", "f16"), default="none",
                   help="gradient buckets on a 16-bit wire (DDP comm hook)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.global_batch % a.world:
        raise SystemExit("ddp_train: global batch %d does not split over %d ranks" % (a.global_batch, a.world))
    if a.compression == "bf16":
        raise SystemExit("ddp_train: torch's bf16_compress_hook needs CUDA and NCCL, and gloo cannot "
                         "all-reduce bfloat16 (torch 1.13: 'Invalid scalar type'); use --compression "
                         "f16 (fp16_compress_hook: the same 2 bytes per gradient)")
    if a.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    need = (a.warmup + a.steps) * a.global_batch  # no more than the run reads
    images = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"), need).copy())
    labels = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"), need).astype(np.int64))
    n = images.shape[0]
    if n != labels.shape[0] or n < a.global_batch:
        raise SystemExit("ddp_train: %d images and %d labels in %s" % (n, labels.shape[0], a.data))
    local = a.global_batch // a.world

    dist.init_process_group("gloo", init_method="tcp://" + a.master, rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=a.timeout))
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(5408, 64), nn.ReLU(), nn.Linear(64, 10))
    ddp = DDP(model)
    if a.compression != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    steps_per_epoch = n // a.global_batch

    def step(i):
        s = (i % steps_per_epoch) * a.global_batch + a.rank * local
        x = images[s:s + local].unsqueeze(1).float().div_(255.0)
        y = labels[s:s + local]
        opt.zero_grad()
        # Mean over the local share; DDP averages over ranks: the mean over the global batch.
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for i in range(a.warmup):
        step(i)
    dist.barrier()
    t0 = time.perf_counter()
    loss = 0.0
    for i in range(a.warmup, a.warmup + a.steps):
        loss = step(i)
    el = torch.tensor([(time.perf_counter() - t0) / a.steps], dtype=torch.float64)
    dist.all_reduce(el, op=dist.ReduceOp.MAX)
    step_s = el.item()
    out = {"world_size": a.world, "batch": a.global_batch, "samples_per_s": a.global_batch / step_s,
           "step_s": step_s, "loss": loss, "torch": torch.__version__, "compression": a.compression}
    if a.rank == 0:
        if a.json:
            print(json.dumps(out))
        else:
            print("DDP gloo R=%d, global batch %d, compression %s: %.1f samples/s, %.3f ms/step, loss %.4f" % (
                a.world, a.global_batch, a.compression, out["samples_per_s"], step_s * 1e3, loss))
    # No destroy_process_group(): in torch 1.13 it can deadlock (the main thread joins a gloo
    # worker that waits for the GIL the main thread holds; seen once in ~10 runs, rank 0 hung
    # after printing). Every rank passes a last barrier, so no peer still needs this one.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
