#!/usr/bin/env python3
"""PyTorch's eager Python training loop on the same GPT as orrery's worker
(worker/model/model.cc: pre-norm blocks, separate q/k/v projections, exact GELU,
row-parallel-style biases added after the projection, no dropout), the same
optimizer and thread count, for bench/worker's single-process comparison.
Prints one JSON line: {"samples_per_s":..., "step_time_s_median":..., ...}."""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.h, self.heads = h, heads
        self.ln1 = torch.nn.LayerNorm(h)
        self.q = torch.nn.Linear(h, h)
        self.k = torch.nn.Linear(h, h)
        self.v = torch.nn.Linear(h, h)
        self.proj = torch.nn.Linear(h, h, bias=False)
        self.proj_bias = torch.nn.Parameter(torch.zeros(h))
        self.ln2 = torch.nn.LayerNorm(h)
        self.fc1 = torch.nn.Linear(h, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, h, bias=False)
        self.fc2_bias = torch.nn.Parameter(torch.zeros(h))

    def forward(self, x):
        b, s, h = x.shape
        hd = h // self.heads
        a = self.ln1(x)
        split = lambda t: t.view(b, s, self.heads, hd).transpose(1, 2)
        q, k, v = split(self.q(a)), split(self.k(a)), split(self.v(a))
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(hd))
        mask = torch.ones(s, s, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        y = x + self.proj(ctx) + self.proj_bias
        m = self.fc2(F.gelu(self.fc1(self.ln2(y))))
        return y + m + self.fc2_bias


class Gpt(torch.nn.Module):
    def __init__(self, layers, h, heads, seq, vocab):
        super().__init__()
        self.tokens = torch.nn.Parameter(torch.randn(vocab, h) * 0.02)
        self.positions = torch.nn.Parameter(torch.randn(seq, h) * 0.02)
        self.blocks = torch.nn.ModuleList([Block(h, heads) for _ in range(layers)])
        self.ln = torch.nn.LayerNorm(h)
        self.head = torch.nn.Linear(h, vocab, bias=False)

    def forward(self, x):
        y = F.embedding(x, self.tokens) + self.positions[: x.shape[1]].unsqueeze(0)
        for blk in self.blocks:
            y = blk(y)
        return self.head(self.ln(y))


def main():
    p = argparse.ArgumentParser()
    for name, default in [("layers", 4), ("hidden", 128), ("heads", 4), ("seq", 64), ("vocab", 256),
                          ("batch", 16), ("threads", 1), ("warmup", 3), ("steps", 10)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--lr", type=float, default=0.05)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Gpt(a.layers, a.hidden, a.heads, a.seq, a.vocab)
    if a.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    times = []
    for i in range(a.warmup + a.steps):
        tokens = torch.randint(a.vocab, (a.batch, a.seq + 1))
        x, y = tokens[:, :-1], tokens[:, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if i >= a.warmup:
            times.append(dt)
    times.sort()
    median = times[len(times) // 2]
    print(json.dumps({"samples_per_s": a.batch / median, "step_time_s_median": median,
                      "torch": torch.__version__, "threads": a.threads,
                      "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
