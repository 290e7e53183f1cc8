#!/usr/bin/env python3
"""PyTorch's own data-parallel templates on the same GPT as orrery's worker
(bench/worker/pytorch_baseline.py's model), for bench/worker's fsdp_bench:
DistributedDataParallel and FullyShardedDataParallel (one FSDP unit per
transformer block, plus the root; BACKWARD_PRE prefetch; with and without
activation checkpointing of every block), CPU and gloo, `--world` ranks as
processes on this machine, one intra-op thread each unless --threads says.
Prints one JSON line: {"ddp": {"samples_per_s": ...}, "fsdp": {...},
"fsdp_recompute": {...}, "torch": ...}."""
import argparse
import functools
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_baseline import Block, Gpt  # noqa: E402


def wrap(kind, model):
    if kind == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import BackwardPrefetch, FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    if kind == "fsdp_recompute":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            apply_activation_checkpointing, checkpoint_wrapper, CheckpointImpl)
        apply_activation_checkpointing(
            model,
            checkpoint_wrapper_fn=functools.partial(
                checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda m: isinstance(m, Block))
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    return FullyShardedDataParallel(model, auto_wrap_policy=policy, device_id=torch.device("cpu"),
                                    backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
                                    forward_prefetch=True, use_orig_params=True)


def run(rank, a, kind, store, out):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                            world_size=a.world)
    torch.manual_seed(0)
    model = wrap(kind, Gpt(a.layers, a.hidden, a.heads, a.seq, a.vocab))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    local = a.batch // a.world
    times = []
    for i in range(a.warmup + a.steps):
        g = torch.Generator().manual_seed(i)
        tokens = torch.randint(a.vocab, (a.batch, a.seq + 1), generator=g)
        tokens = tokens[rank * local:(rank + 1) * local]
        x, y = tokens[:, :-1], tokens[:, 1:]
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        t = torch.tensor([time.perf_counter() - t0])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if i >= a.warmup:
            times.append(t.item())
    if rank == 0:
        times.sort()
        median = times[len(times) // 2]
        with open(out, "w") as f:
            json.dump({"samples_per_s": a.batch / median, "step_time_s_median": median}, f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("hidden", 128), ("heads", 4), ("seq", 64),
                          ("vocab", 256), ("batch", 16), ("threads", 1), ("warmup", 3),
                          ("steps", 10), ("world", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--kinds", default="ddp,fsdp,fsdp_recompute")
    a = p.parse_args()
    report = {"torch": torch.__version__, "threads": a.threads, "world": a.world}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in a.kinds.split(","):
            store, out = os.path.join(tmp, kind + ".store"), os.path.join(tmp, kind + ".json")
            try:
                mp.spawn(run, args=(a, kind, store, out), nprocs=a.world, join=True)
                with open(out) as f:
                    report[kind] = json.load(f)
            except Exception as e:  # one kind failing leaves the others' figures
                report[kind] = {"error": str(e).splitlines()[-1] if str(e) else repr(e)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
