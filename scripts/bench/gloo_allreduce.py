"""gloo_allreduce.py - the gloo peer of `dtrain bench allreduce`: torch.distributed all_reduce
(float32, sum) on the gloo backend, timed the way nccl-tests times collectives, printing the same
JSON as dtrain's bench.

  python3 gloo_allreduce.py --rank I --world R --master ADDR:PORT [--sizes 4K,64K,1M]
                            [--iters N] [--warmup W] [--budget S] [--warmup-s S]
                            [--iface IFACE] [--json]

One process per rank, started by the caller (scripts/bench/allreduce-vs-peers.sh starts each rank
on its own netns host, or all on loopback). Rank 0 listens at ADDR:PORT (the TCP store).
For each size: one call on known data (rank r holds r+1) checks the sum on every rank; W warm-up
calls (with --warmup-s, more until S seconds have passed, in batches rank 0 sizes by the previous
batch's pace and broadcasts); rank 0 turns the warm-up time into an iteration count (at most N, at least 3, about S
seconds) and broadcasts it; a barrier; that many back-to-back calls on a zero tensor (zeros stay
zeros, so no overflow or denormals skew the timing). time_s is the mean time of one call, the
slowest rank's; algbw = bytes / time_s, busbw = algbw * 2(R-1)/R; cpu_s is the CPU time (all
threads, user and system) of one call, the mean over ranks. Rank 0 prints.
"""
import argparse
import datetime
import json
import math
import os
import sys
import time


def parse_size(s):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = s.strip().upper().rstrip("B")
    u = t[-1] if t and t[-1] in "KMG" else ""
    n = t[: len(t) - len(u)]
    if not n.isdigit() or int(n) * units[u] % 4 or int(n) == 0:
        raise argparse.ArgumentTypeError("size '%s' is not a positive multiple of 4 bytes" % s)
    return int(n) * units[u]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="ADDR:PORT of rank 0's TCP store")
    p.add_argument("--sizes", default="4K,64K,1M,4M,16M,64M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--budget", type=float, default=3.0)
    p.add_argument("--warmup-s", type=float, default=0.0)
    p.add_argument("--iface", help="GLOO_SOCKET_IFNAME: the interface gloo's pairs use")
    p.add_argument("--timeout", type=float, default=120, help="seconds for rendezvous and each call")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    if a.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://" + a.master, rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=a.timeout))
    R = a.world
    rows = []
    if a.rank == 0 and not a.json:
        print("%12s %8s %12s %12s %12s %12s" % ("bytes", "iters", "time_us", "algbw_GBps", "busbw_GBps",
                                                 "cpu_us"))
    rc = 0
    for b in sizes:
        t = torch.full((b // 4,), float(a.rank + 1), dtype=torch.float32)
        dist.all_reduce(t)
        bad = torch.tensor([0 if bool((t == R * (R + 1) / 2).all()) else 1])
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        if bad.item():
            if a.rank == 0:
                print("gloo_allreduce: wrong sum at %d bytes" % b, file=sys.stderr)
            rc = 1
        t.zero_()
        t0 = time.perf_counter()
        for _ in range(a.warmup):
            dist.all_reduce(t)
        per = (time.perf_counter() - t0) / a.warmup
        # --warmup-s: more untimed calls until S seconds, in batches sized by the previous
        # batch's pace (the first calls are the slow ones), counted on rank 0 for every rank
        tb, batch = t0, a.warmup
        while True:
            now = time.perf_counter()
            spent, pace = now - t0, max((now - tb) / batch, 1e-6)
            more = torch.tensor([min(100000, math.ceil((a.warmup_s - spent) / pace))
                                 if spent < a.warmup_s else 0])
            dist.broadcast(more, 0)
            batch = int(more.item())
            if batch <= 0:
                break
            tb = time.perf_counter()
            for _ in range(batch):
                dist.all_reduce(t)
        it = torch.tensor([max(3, min(a.iters, int(a.budget / per) if per > 0 else a.iters))])
        dist.broadcast(it, 0)
        it = int(it.item())
        dist.barrier()
        c0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(it):
            dist.all_reduce(t)
        el = torch.tensor([(time.perf_counter() - t0) / it], dtype=torch.float64)
        cpu = torch.tensor([(time.process_time() - c0) / it], dtype=torch.float64)
        dist.all_reduce(el, op=dist.ReduceOp.MAX)
        dist.all_reduce(cpu)
        ts = el.item()
        alg = b / ts / 1e9
        row = {"bytes": b, "iters": it, "time_s": ts, "algbw_GBps": alg,
               "busbw_GBps": alg * 2 * (R - 1) / R, "cpu_s": cpu.item() / R}
        rows.append(row)
        if a.rank == 0 and not a.json:
            print("%12d %8d %12.1f %12.4f %12.4f %12.1f" % (b, it, ts * 1e6, alg, row["busbw_GBps"],
                                                          row["cpu_s"] * 1e6), flush=True)
    if a.rank == 0 and a.json:
        print(json.dumps({"world_size": R, "torch": torch.__version__, "rows": rows}))
    # No destroy_process_group(): it can deadlock in torch 1.13 (see ddp_train.py); a last
    # barrier, so no peer still needs this rank.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


if __name__ == "__main__":
    sys.exit(main())
