#!/usr/bin/env python3
"""The torch.distributed.checkpoint baseline of bench/live_state.

live_state_bench writes --spec: every GPT parameter's name, global shape, tensor-
parallel dimension (-1 replicated) and the tp2 x pp2 pipeline stages that hold
it, plus the optimizer slots ("exp_avg", "exp_avg_sq"). Four gloo ranks (one
process each, one intra-op thread) build the same state -- "model/<p>" and
"optim/<slot>/<p>" -- sharded FSDP-style (DTensor, Shard(0) over a 1-D mesh of
4, torch.chunk sizes), save it with dcp.save, drop it, evict the files from the
page cache (posix_fadvise DONTNEED), and load it with dcp.load into a tp2 x pp2
layout: each rank holds its stage's tensors as DTensors on its 2-rank tp mesh
(Shard(tp_dim) or Replicate()), so DCP re-shards. Prints, for the bench to parse:

  dcp_save seconds=S bytes=B needed=N rss_delta=D rss_peak_max=P
  dcp_load seconds=S bytes=B needed=N rss_delta=D rss_peak_max=P

seconds: between two barriers around dcp.save / dcp.load (all ranks); bytes:
written (wchar) or read (rchar) by the 4 processes during it, from /proc/self/io;
needed: the bytes of the ranks' local shards; rss_delta: the sum over ranks of
peak minus starting resident memory (VmHWM after a reset through
/proc/self/clear_refs); rss_peak_max: the largest rank's peak. Values are
checked after the load. For the benchmark only: run
bench/checkpoint/setup_venv.sh first.
"""
import argparse
import json
import os
import shutil
import socket
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

WORLD, TP, PP = 4, 2, 2


def status_bytes(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def io_bytes(key):
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def chunk(n, parts, i):
    """torch.chunk's piece i of n along a dimension: [lo, hi)."""
    c = -(-n // parts)
    lo = min(i * c, n)
    return lo, min(lo + c, n)


def contiguous_stride(shape):
    stride, s = [], 1
    for d in reversed(shape):
        stride.insert(0, s)
        s *= d
    return tuple(stride)


def values(tid, shape, dim, lo, hi):
    """The value of every element of tensor `tid` in [lo, hi) along `dim`
    (everything along the others): tid + row code + column code."""
    rng = [(0, n) for n in shape]
    if dim >= 0:
        rng[dim] = (lo, hi)
    rows = (torch.arange(*rng[0], dtype=torch.float32) % 997) * 1e-3 + float(tid)
    if len(shape) == 1:
        return rows
    cols = (torch.arange(*rng[1], dtype=torch.float32) % 13) * 0.1
    return rows[:, None] + cols[None, :]


def tensors(spec):
    """(id, name, shape, tp_dim, stages) of every tensor of the collection."""
    out = []
    for p in spec["params"]:
        for kind in ["model/"] + [f"optim/{s}/" for s in spec["slots"]]:
            out.append((len(out), kind + p["name"], p["shape"], p["tp_dim"], p["stages"]))
    return out


def measure(op):
    """Runs op between barriers; returns this rank's figures."""
    dist.barrier()
    reset_peak()
    before = status_bytes("VmRSS")
    r0, w0 = io_bytes("rchar"), io_bytes("wchar")
    t0 = time.monotonic()
    op()
    dist.barrier()
    seconds = time.monotonic() - t0
    peak = status_bytes("VmHWM")
    return {"seconds": seconds, "read": io_bytes("rchar") - r0, "written": io_bytes("wchar") - w0,
            "delta": max(0, peak - before), "peak": peak}


def report(tag, mine, needed, key):
    everyone = [None] * WORLD
    dist.all_gather_object(everyone, (mine, needed))
    if dist.get_rank() == 0:
        ms = [m for m, _ in everyone]
        print(f"{tag} seconds={max(m['seconds'] for m in ms):.4f} "
              f"bytes={sum(m[key] for m in ms)} needed={sum(n for _, n in everyone)} "
              f"rss_delta={sum(m['delta'] for m in ms)} rss_peak_max={max(m['peak'] for m in ms)}",
              flush=True)


def evict(path):
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def worker(rank, port, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    with open(args.spec) as f:
        spec = json.load(f)
    all_tensors = tensors(spec)

    # Save: FSDP-style, every tensor Shard(0) over the 4 ranks.
    mesh = init_device_mesh("cpu", (WORLD,))
    sd, needed = {}, 0
    for tid, name, shape, _, _ in all_tensors:
        lo, hi = chunk(shape[0], WORLD, rank)
        local = values(tid, shape, 0, lo, hi)
        needed += local.numel() * local.element_size()
        sd[name] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                      shape=torch.Size(shape), stride=contiguous_stride(shape))
    mine = measure(lambda: dcp.save(sd, checkpoint_id=args.dir))
    report("dcp_save", mine, needed, "written")
    del sd
    if rank == 0:
        os.sync()
        evict(args.dir)

    # Load: tp2 x pp2 (tp fastest), each stage's tensors on its tp mesh.
    mesh2 = init_device_mesh("cpu", (PP, TP), mesh_dim_names=("pp", "tp"))
    stage, tp_rank = rank // TP, rank % TP
    sd, needed, expect = {}, 0, {}
    for tid, name, shape, tp_dim, stages in all_tensors:
        if stage not in stages:
            continue
        if tp_dim >= 0:
            lo, hi = chunk(shape[tp_dim], TP, tp_rank)
            local_shape = list(shape)
            local_shape[tp_dim] = hi - lo
            placement = Shard(tp_dim)
        else:
            lo, hi, local_shape, placement = 0, 0, list(shape), Replicate()
        local = torch.empty(local_shape)
        needed += local.numel() * local.element_size()
        expect[name] = (tid, shape, tp_dim, lo, hi)
        sd[name] = DTensor.from_local(local, mesh2["tp"], [placement], run_check=False,
                                      shape=torch.Size(shape), stride=contiguous_stride(shape))
    mine = measure(lambda: dcp.load(sd, checkpoint_id=args.dir))
    report("dcp_load", mine, needed, "read")
    for name, (tid, shape, tp_dim, lo, hi) in expect.items():
        if not torch.equal(sd[name].to_local(), values(tid, shape, tp_dim, lo, hi)):
            raise SystemExit(f"rank {rank}: DCP loaded wrong values into {name}")
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--spec", required=True)
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    print(f"torch {torch.__version__}: DCP save Shard(0) x{WORLD}, load tp{TP} x pp{PP}",
          flush=True)
    mp.spawn(worker, args=(free_port(), args), nprocs=WORLD, join=True)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
