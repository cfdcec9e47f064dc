#!/usr/bin/env python3
"""RematLab against PyTorch's own checkpointing, side by side in one run.

The peer is the same model written in Python on the same pinned PyTorch — GPT-2 (`--arch gpt`)
or Llama (`--arch llama`: RMSNorm, no biases, grouped-query attention, rotary positions, SwiGLU,
untied head), written here from the architectures' definitions — with
torch.utils.checkpoint(use_reentrant=False) over segments of K blocks (every segment
recomputed, as RematLab's every:K), and for RematLab's keep:matmul the same checkpoint of every
block with PyTorch's selective checkpoint contexts saving the outputs of aten.mm and aten.addmm
(every projection: nn.Linear runs as one of them on these shapes). Both sides use the same
shape, batch, thread count, steps and warm-up; time is the median step, memory the peak live
tensor bytes above the step's start (CPU allocator events in both: RematLab's reporting hook,
PyTorch's profiler).

    .venv/bin/python bench/vs_pytorch.py --cli build/app/rematlab-cli --threads 2
    .venv/bin/python bench/vs_pytorch.py --arch llama --heads 8 --kv-heads 4 --mlp-hidden 704
    .venv/bin/python bench/vs_pytorch.py --policies none,every:1,keep:matmul
"""
import argparse
import functools
import warnings
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

# What PyTorch's selective checkpoint keeps for RematLab's keep:matmul: every matmul's output.
SAVED_MATMULS = [torch.ops.aten.mm.default, torch.ops.aten.addmm.default]


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


class RmsNorm(nn.Module):
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotary_tables(seq_len, head_dim, theta):
    frequencies = theta ** (-torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(seq_len).float(), frequencies)
    doubled = torch.cat((angles, angles), dim=-1)
    return doubled.cos(), doubled.sin()


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    t = x.shape[2]
    return x * cos[:t] + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin[:t]


class LlamaAttention(nn.Module):
    def __init__(self, d_model, heads, kv_heads, tables):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d_model // heads
        self.tables = tables
        self.norm = RmsNorm(d_model)
        self.qkv = nn.Linear(d_model, (heads + 2 * kv_heads) * self.hd, bias=False)
        self.out = nn.Linear(heads * self.hd, d_model, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).split(
            (self.heads * self.hd, self.kv_heads * self.hd, self.kv_heads * self.hd), dim=2)
        q = q.view(b, t, self.heads, self.hd).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        cos, sin = self.tables
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=self.kv_heads != self.heads)
        return x + self.out(y.transpose(1, 2).contiguous().view(b, t, self.heads * self.hd))


class SwiGlu(nn.Module):
    def __init__(self, d_model, hidden):
        super().__init__()
        self.norm = RmsNorm(d_model)
        self.up = nn.Linear(d_model, 2 * hidden, bias=False)  # gate and up, fused
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        gate, up = self.up(self.norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.token = nn.Embedding(args.vocab, args.d_model)
        self.sublayers = nn.ModuleList()
        if args.arch == "gpt":
            self.position = nn.Embedding(args.seq_len, args.d_model)
            for _ in range(args.layers):
                self.sublayers.append(Attention(args.d_model, args.heads))
                self.sublayers.append(Mlp(args.d_model))
            self.norm = nn.LayerNorm(args.d_model)
            self.head = None  # tied
        else:
            self.position = None
            tables = rotary_tables(args.seq_len, args.d_model // args.heads, args.rope_theta)
            for _ in range(args.layers):
                self.sublayers.append(LlamaAttention(args.d_model, args.heads,
                                                     args.kv_heads or args.heads, tables))
                self.sublayers.append(SwiGlu(args.d_model, args.mlp_hidden))
            self.norm = RmsNorm(args.d_model)
            self.head = nn.Linear(args.d_model, args.vocab, bias=False)

    def forward(self, tokens, every, keep_matmuls=False):
        h = self.token(tokens)
        if self.position is not None:
            h = h + self.position(torch.arange(tokens.shape[1]))
        if every == 0:
            for sublayer in self.sublayers:
                h = sublayer(h)
        else:
            span = 2 * every
            extra = {}
            if keep_matmuls:
                extra["context_fn"] = functools.partial(create_selective_checkpoint_contexts,
                                                        SAVED_MATMULS)
            for begin in range(0, len(self.sublayers), span):
                segment = self.sublayers[begin:begin + span]
                h = checkpoint(lambda x, seg=segment: _run(seg, x), h, use_reentrant=False,
                               **extra)
        weight = self.token.weight if self.head is None else self.head.weight
        return F.linear(self.norm(h), weight)


def _run(segment, x):
    for sublayer in segment:
        x = sublayer(x)
    return x


def peer_step(model, optimizer, tokens, targets, policy, vocab):
    every, keep_matmuls = peer_policy(policy)
    logits = model(tokens, every, keep_matmuls)
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


def peer_policy(policy):
    """RematLab's policy text as the peer's (K, keep matmul outputs); K = 0 is none."""
    if policy == "none":
        return 0, False
    if policy == "keep:matmul":
        return 1, True
    if policy.startswith("every:"):
        return int(policy.split(":")[1]), False
    raise SystemExit(f"--policies: the peer has no counterpart for '{policy}'")


def run_peer(args, policy):
    torch.manual_seed(0)
    model = Transformer(args)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    step = lambda: peer_step(model, optimizer, tokens, targets, policy, args.vocab)
    step_s = median_step_seconds(step, args.warmup, args.steps)
    return {"step_ms": 1e3 * step_s, "tokens_per_s": args.batch * args.seq_len / step_s,
            "peak_activation_bytes": peer_peak_activation(step)}


def run_rematlab(args, policy, cli=None):
    shape = ["--arch", args.arch]
    if args.arch == "llama":
        shape += ["--kv-heads", str(args.kv_heads or args.heads), "--mlp-hidden",
                  str(args.mlp_hidden), "--tie-head", "false"]
    command = [cli or args.cli, "run", *shape, "--layers", str(args.layers), "--d-model", str(args.d_model),
               "--heads", str(args.heads), "--seq-len", str(args.seq_len), "--vocab",
               str(args.vocab), "--batch", str(args.batch), "--steps",
               str(args.warmup + args.steps), "--warmup-steps", str(args.warmup), "--threads",
               str(args.threads), "--checkpoint", policy, "--json"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return {key: result[key] for key in ("step_ms", "tokens_per_s", "peak_activation_bytes")}


def median_step_seconds(step, warmup, steps):
    """The median wall time of `steps` calls of `step` after `warmup` untimed ones."""
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def median_run(runs):
    """The run whose step time is the median of the rounds (so its memory comes with it)."""
    return sorted(runs, key=lambda r: r["step_ms"])[len(runs) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--arch", choices=("gpt", "llama"), default="gpt")
    parser.add_argument("--kv-heads", type=int, default=0, help="llama: 0 means as many as heads")
    parser.add_argument("--mlp-hidden", type=int, default=704, help="llama: SwiGLU width")
    parser.add_argument("--rope-theta", type=float, default=10000.0)
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
    parser.add_argument("--before-cli", default=None,
                        help="an earlier rematlab-cli, run in the same rounds (its columns: "
                        "before); it skips keep: policies, which it may not know")
    parser.add_argument("--policies", default="none,every:1,every:2",
                        help="comma-separated: none, every:K, keep:matmul")
    args = parser.parse_args()
    policies = args.policies.split(",")
    for policy in policies:
        peer_policy(policy)  # rejects what the peer cannot run, before anything runs
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # the profiler warns that it sees no GPU

    blas = "MKL" if torch.backends.mkl.is_available() else "not MKL"
    # The machine may be shared: its load beside the figures says how far to trust them.
    load = lambda: "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average (1/5/15 min) at start: {load()}")
    print(f"PyTorch {torch.__version__} ({blas}), {args.threads} threads; {args.arch}, {args.layers} blocks, "
          f"d {args.d_model}, seq {args.seq_len}, batch {args.batch}; median step of {args.steps} "
          f"after {args.warmup} warm-up, median of {args.rounds} rounds")
    header = ("policy", "ours tok/s", "peer tok/s", "ours/peer", "ours ms (min–max)",
              "peer ms (min–max)",
              "ours act MiB", "peer act MiB", "act ours/peer", "step / none (ours)",
              "step / none (peer)")
    if args.before_cli:
        header += ("before ms (min–max)", "before act MiB", "act before/peer",
                   "step / none (before)")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    # Rounds outside, policies inside: every policy is measured across the same stretch of
    # time, so drifting machine speed cannot masquerade as a policy's cost.
    runs = {(policy, side): [] for policy in policies for side in ("ours", "peer", "before")}
    before = lambda policy: args.before_cli and not policy.startswith("keep:")
    for _ in range(args.rounds):
        for policy in policies:
            runs[(policy, "ours")].append(run_rematlab(args, policy))
            runs[(policy, "peer")].append(run_peer(args, policy))
            if before(policy):
                runs[(policy, "before")].append(run_rematlab(args, policy, args.before_cli))
    none = ((median_run(runs[("none", "ours")]), median_run(runs[("none", "peer")]))
            if "none" in policies else None)
    for policy in policies:
        ours, peer = median_run(runs[(policy, "ours")]), median_run(runs[(policy, "peer")])
        spread = lambda side: "–".join(f"{f(runs[(policy, side)]):.0f}" for f in (
            lambda rs: min(r["step_ms"] for r in rs), lambda rs: max(r["step_ms"] for r in rs)))
        row = (policy,
               f"{ours['tokens_per_s']:.0f}", f"{peer['tokens_per_s']:.0f}",
               f"{ours['tokens_per_s'] / peer['tokens_per_s']:.2f}",
               f"{ours['step_ms']:.0f} ({spread('ours')})", f"{peer['step_ms']:.0f} ({spread('peer')})",
               f"{ours['peak_activation_bytes'] / 2**20:.1f}",
               f"{peer['peak_activation_bytes'] / 2**20:.1f}",
               f"{ours['peak_activation_bytes'] / peer['peak_activation_bytes']:.2f}",
               f"{ours['step_ms'] / none[0]['step_ms']:.2f}" if none else "",
               f"{peer['step_ms'] / none[1]['step_ms']:.2f}" if none else "")
        if args.before_cli:
            if before(policy):
                old = median_run(runs[(policy, "before")])
                old_none = median_run(runs[("none", "before")]) if none else None
                row += (f"{old['step_ms']:.0f} ({spread('before')})",
                        f"{old['peak_activation_bytes'] / 2**20:.1f}",
                        f"{old['peak_activation_bytes'] / peer['peak_activation_bytes']:.2f}",
                        f"{old['step_ms'] / old_none['step_ms']:.2f}" if old_none else "")
            else:
                row += ("", "", "", "")
        print("| " + " | ".join(row) + " |", flush=True)
    print(f"load average (1/5/15 min) at end: {load()}")

if __name__ == "__main__":
    sys.exit(main())
