#!/usr/bin/env python3
"""The torch.distributed.checkpoint baseline of bench/checkpoint.

Builds the same synthetic state as checkpoint_bench.cc (same tensors, shapes,
partition specs and values), saves it with DCP from the old layout (one process
per rank, gloo on CPU, each rank's tensors as DTensors over its stage's dp x tp
mesh), then loads it into the new layout with DCP and prints the load time as
"dcp_load_seconds <s>" (the slowest rank, between two barriers). For the
benchmark only: run bench/checkpoint/setup_venv.sh first.
"""
import argparse
import os
import shutil
import socket
import subprocess
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh

try:
    from torch.distributed.tensor import DTensor, Replicate, Shard
except ImportError:  # torch < 2.4
    from torch.distributed._tensor import DTensor, Replicate, Shard


def parse_layout(text):
    d = {"dp": 1, "tp": 1, "pp": 1, "fsdp": 1}
    for item in text.split(","):
        k, v = item.split("=")
        d[k] = int(v)
    return d


def specs(layers, h):
    """(id, name, shape, layer, tp_dim) in checkpoint_bench.cc's order."""
    weights = [("attn.qkv.weight", (3 * h, h), 0), ("attn.proj.weight", (h, h), 1),
               ("mlp.fc1.weight", (4 * h, h), 0), ("mlp.fc2.weight", (h, 4 * h), 1)]
    out = []
    for l in range(layers):
        for name, shape, tp_dim in weights:
            for kind in ("model/", "optim/exp_avg/", "optim/exp_avg_sq/"):
                out.append((len(out), f"{kind}layers.{l}.{name}", shape, l, tp_dim))
        out.append((len(out), f"model/layers.{l}.ln.weight", (h,), l, -1))
    return out


def stage_of(layer, layers, pp):
    return layer * pp // layers


def local_slice(global_shape, tp_dim, tp, tp_rank):
    lo, hi = [0] * len(global_shape), list(global_shape)
    if tp_dim >= 0:
        n = global_shape[tp_dim]
        lo[tp_dim], hi[tp_dim] = n * tp_rank // tp, n * (tp_rank + 1) // tp
    return lo, hi


def values(tid, global_shape, lo, hi):
    # Value(id, g) = (g % 65521) + 0.25 * (id % 8), g the global row-major index.
    idx = torch.zeros([b - a for a, b in zip(lo, hi)], dtype=torch.int64)
    stride = 1
    for d in reversed(range(len(global_shape))):
        shape = [1] * len(global_shape)
        shape[d] = hi[d] - lo[d]
        idx += torch.arange(lo[d], hi[d], dtype=torch.int64).view(shape) * stride
        stride *= global_shape[d]
    return (idx % 65521).to(torch.float32) + 0.25 * (tid % 8)


def state_dict(layout, rank, layers, h, fill):
    pp, dp, tp = layout["pp"], layout["dp"], layout["tp"]
    mesh = init_device_mesh("cpu", (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))
    sub = mesh["dp", "tp"]
    my_pp, my_tp = rank // (dp * tp), rank % tp
    sd = {}
    for tid, name, shape, layer, tp_dim in specs(layers, h):
        if stage_of(layer, layers, pp) != my_pp:
            continue
        lo, hi = local_slice(shape, tp_dim, tp, my_tp)
        local = values(tid, shape, lo, hi) if fill else torch.empty([b - a for a, b in zip(lo, hi)])
        placements = [Replicate(), Shard(tp_dim) if tp_dim >= 0 else Replicate()]
        sd[name] = DTensor.from_local(local, sub, placements, run_check=False)
    return sd


def worker(rank, world, port, mode, args, result_file):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    layout = parse_layout(args.from_layout if mode == "save" else args.to_layout)
    sd = state_dict(layout, rank, args.layers, args.hidden, fill=(mode == "save"))
    dist.barrier()
    t0 = time.monotonic()
    if mode == "save":
        dcp.save(sd, checkpoint_id=args.dir)
    else:
        dcp.load(sd, checkpoint_id=args.dir)
    dist.barrier()
    elapsed = time.monotonic() - t0
    if mode == "load":
        # Spot check: the loaded local shards equal the generator.
        tp, dp = layout["tp"], layout["dp"]
        for tid, name, shape, layer, tp_dim in specs(args.layers, args.hidden):
            if name in sd:
                lo, hi = local_slice(shape, tp_dim, tp, rank % tp)
                if not torch.equal(sd[name].to_local(), values(tid, shape, lo, hi)):
                    raise SystemExit(f"rank {rank}: wrong values in {name}")
                break
    if rank == 0:
        with open(result_file, "w") as f:
            f.write(f"{elapsed}\n")
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--from", dest="from_layout", required=True)
    p.add_argument("--to", dest="to_layout", required=True)
    p.add_argument("--drop-caches", action="store_true")
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    result = os.path.join(args.dir, "..", "dcp_result.txt")
    print(f"torch {torch.__version__}: saving with DCP under {args.from_layout}", flush=True)
    w_old = parse_layout(args.from_layout)
    w_old = w_old["dp"] * w_old["tp"] * w_old["pp"]
    mp.spawn(worker, args=(w_old, free_port(), "save", args, result), nprocs=w_old, join=True)
    with open(result) as f:
        print(f"dcp_save_seconds {float(f.read()):.3f}", flush=True)
    w_new = parse_layout(args.to_layout)
    w_new = w_new["dp"] * w_new["tp"] * w_new["pp"]
    cold = args.drop_caches and drop_caches()
    print(f"loading with DCP under {args.to_layout} ({'cold' if cold else 'warm'} cache)", flush=True)
    mp.spawn(worker, args=(w_new, free_port(), "load", args, result), nprocs=w_new, join=True)
    with open(result) as f:
        print(f"dcp_load_seconds {float(f.read()):.3f}", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
