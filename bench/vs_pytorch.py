#!/usr/bin/env python3
"""RematLab against PyTorch's own checkpointing, side by side in one run.

The peer is the same GPT-2-style model written in Python on the same pinned PyTorch, with
torch.utils.checkpoint(use_reentrant=False) over segments of K blocks (every segment
recomputed, as RematLab's every:K). Both sides use the same shape, batch, thread count, steps
and warm-up; time is the median step, memory the peak live tensor bytes above the step's start
(CPU allocator events in both: RematLab's reporting hook, PyTorch's profiler).

    .venv/bin/python bench/vs_pytorch.py --cli build/app/rematlab-cli --threads 2
"""
import argparse
import warnings
import json
import math
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Attention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(y.transpose(1, 2).contiguous().view(b, t, c))


class Mlp(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, 4 * d_model)
        self.down = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Gpt(nn.Module):
    def __init__(self, layers, d_model, heads, seq_len, vocab):
        super().__init__()
        self.token = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(seq_len, d_model)
        self.sublayers = nn.ModuleList()
        for _ in range(layers):
            self.sublayers.append(Attention(d_model, heads))
            self.sublayers.append(Mlp(d_model))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, tokens, every):
        h = self.token(tokens) + self.position(torch.arange(tokens.shape[1]))
        if every == 0:
            for sublayer in self.sublayers:
                h = sublayer(h)
        else:
            span = 2 * every
            for begin in range(0, len(self.sublayers), span):
                segment = self.sublayers[begin:begin + span]
                h = checkpoint(lambda x, seg=segment: _run(seg, x), h, use_reentrant=False)
        return F.linear(self.norm(h), self.token.weight)


def _run(segment, x):
    for sublayer in segment:
        x = sublayer(x)
    return x


def peer_step(model, optimizer, tokens, targets, every, vocab):
    logits = model(tokens, every)
    loss = F.cross_entropy(logits.view(-1, vocab), targets.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)  # as RematLab: gradients stay allocated


def peer_peak_activation(step):
    """Peak live CPU tensor bytes above the start of one step, from the profiler's allocator events."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profiler:
        step()
    # Raw allocator events (the same hook RematLab reads), each +bytes or -bytes, in time order.
    events = sorted((e for e in profiler.profiler.kineto_results.events() if e.name() == "[memory]"
                     and e.device_type() == torch.autograd.DeviceType.CPU),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def run_peer(args, every):
    torch.manual_seed(0)
    model = Gpt(args.layers, args.d_model, args.heads, args.seq_len, args.vocab)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    step = lambda: peer_step(model, optimizer, tokens, targets, every, args.vocab)
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    return {"step_ms": 1e3 * step_s, "tokens_per_s": args.batch * args.seq_len / step_s,
            "peak_activation_bytes": peer_peak_activation(step)}


def run_rematlab(args, every):
    policy = "none" if every == 0 else f"every:{every}"
    command = [args.cli, "run", "--layers", str(args.layers), "--d-model", str(args.d_model),
               "--heads", str(args.heads), "--seq-len", str(args.seq_len), "--vocab",
               str(args.vocab), "--batch", str(args.batch), "--steps",
               str(args.warmup + args.steps), "--warmup-steps", str(args.warmup), "--threads",
               str(args.threads), "--checkpoint", policy, "--json"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return {key: result[key] for key in ("step_ms", "tokens_per_s", "peak_activation_bytes")}


def median_run(runs):
    """The run whose step time is the median of the rounds (so its memory comes with it)."""
    return sorted(runs, key=lambda r: r["step_ms"])[len(runs) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3,
                        help="every policy, ours then the peer, this many times over")
    parser.add_argument("--intervals", default="0,1,2", help="K of every:K; 0 is none")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # the profiler warns that it sees no GPU

    blas = "MKL" if torch.backends.mkl.is_available() else "not MKL"
    print(f"PyTorch {torch.__version__} ({blas}), {args.threads} threads; {args.layers} blocks, "
          f"d {args.d_model}, seq {args.seq_len}, batch {args.batch}; median step of {args.steps} "
          f"after {args.warmup} warm-up, median of {args.rounds} rounds")
    header = ("policy", "ours tok/s", "peer tok/s", "ours/peer", "ours ms (min–max)",
              "peer ms (min–max)",
              "ours act MiB", "peer act MiB", "act ours/peer", "step / none (ours)",
              "step / none (peer)")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    intervals = [int(k) for k in args.intervals.split(",")]
    # Rounds outside, policies inside: every policy is measured across the same stretch of
    # time, so drifting machine speed cannot masquerade as a policy's cost.
    runs = {(every, side): [] for every in intervals for side in ("ours", "peer")}
    for _ in range(args.rounds):
        for every in intervals:
            runs[(every, "ours")].append(run_rematlab(args, every))
            runs[(every, "peer")].append(run_peer(args, every))
    none = (median_run(runs[(0, "ours")]), median_run(runs[(0, "peer")])) if 0 in intervals else None
    for every in intervals:
        ours, peer = median_run(runs[(every, "ours")]), median_run(runs[(every, "peer")])
        spread = lambda side: "–".join(f"{f(runs[(every, side)]):.0f}" for f in (
            lambda rs: min(r["step_ms"] for r in rs), lambda rs: max(r["step_ms"] for r in rs)))
        row = (("none" if every == 0 else f"every:{every}"),
               f"{ours['tokens_per_s']:.0f}", f"{peer['tokens_per_s']:.0f}",
               f"{ours['tokens_per_s'] / peer['tokens_per_s']:.2f}",
               f"{ours['step_ms']:.0f} ({spread('ours')})", f"{peer['step_ms']:.0f} ({spread('peer')})",
               f"{ours['peak_activation_bytes'] / 2**20:.1f}",
               f"{peer['peak_activation_bytes'] / 2**20:.1f}",
               f"{ours['peak_activation_bytes'] / peer['peak_activation_bytes']:.2f}",
               f"{ours['step_ms'] / none[0]['step_ms']:.2f}" if none else "",
               f"{peer['step_ms'] / none[1]['step_ms']:.2f}" if none else "")
        print("| " + " | ".join(row) + " |", flush=True)

if __name__ == "__main__":
    sys.exit(main())
