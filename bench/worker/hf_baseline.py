#!/usr/bin/env python3
"""The baseline of bench/worker/hf_model_bench: transformers' own GPT-2 or Llama
(eager attention, no dropout) trained by PyTorch's eager Python loop with AdamW on
random tokens, single process or DistributedDataParallel on gloo, the same shape,
global batch and intra-op threads per rank as the Orrery run it is compared with.
With --device cuda the loop runs on the GPU (synchronised before each step's time
is read) and --precision bf16 runs the forward under bfloat16 autocast with float32
master weights, as the worker's --precision bf16 does.
Prints one JSON line: {"samples_per_s": ..., "step_time_s_median": ..., "parameters": ...}.
Run with the interpreter scripts/reference-venv prints."""
import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers


def build(a):
    if a.family == "gpt2":
        config = transformers.GPT2Config(
            n_layer=a.layers, n_embd=a.hidden, n_head=a.heads, n_positions=max(a.seq, 1024),
            vocab_size=a.vocab, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    else:
        config = transformers.LlamaConfig(
            num_hidden_layers=a.layers, hidden_size=a.hidden, num_attention_heads=a.heads,
            num_key_value_heads=a.kv_heads, intermediate_size=a.intermediate,
            vocab_size=a.vocab, max_position_embeddings=max(a.seq, 2048))
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")


def run(rank, a, init, out):
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cuda = a.device == "cuda"
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if a.world > 1:
        dist.init_process_group("nccl" if cuda else "gloo", init_method=init, rank=rank,
                                world_size=a.world)
    model = build(a).float().train().to(device)
    params = sum(p.numel() for p in model.parameters())
    if a.world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    local = a.batch // a.world
    g = torch.Generator().manual_seed(1 + rank)
    times = []
    for step in range(a.warmup + a.steps):
        tokens = torch.randint(0, a.vocab, (local, a.seq + 1), generator=g).to(device)
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(input_ids=tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                                 tokens[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize(device)
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    if a.world > 1:
        t = torch.tensor([statistics.median(times)], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        median = t.item()
        dist.destroy_process_group()
    else:
        median = statistics.median(times)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"samples_per_s": a.batch / median, "step_time_s_median": median,
                       "parameters": params}, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--family", choices=["gpt2", "llama"], required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--intermediate", type=int, default=0)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        init = "file://" + os.path.join(d, "store")
        if a.world == 1:
            run(0, a, init, out)
        else:
            mp.spawn(run, args=(a, init, out), nprocs=a.world, join=True)
        with open(out) as f:
            print(f.read())


if __name__ == "__main__":
    main()
