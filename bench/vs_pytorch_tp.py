#!/usr/bin/env python3
"""RematLab's tensor and sequence parallelism against PyTorch's own (DTensor), side by side.

The peer is the Llama of bench/vs_pytorch.py split the way PyTorch's tensor-parallel API splits
it (torch.distributed.tensor.parallel.parallelize_module, the plan torchtitan uses): query,
key/value, gate and up projections ColwiseParallel, the output and down projections
RowwiseParallel, the token embedding RowwiseParallel over the vocabulary, the head
ColwiseParallel with PyTorch's vocabulary-parallel loss (loss_parallel), and under sequence
parallelism the norms SequenceParallel with each sublayer's input gathered by PrepareModuleInput.
every:1 is torch.utils.checkpoint (non-reentrant) over each block. Both sides run T processes on
Gloo over 127.0.0.1 with the same shape, batch, steps, warm-up and one thread per rank; the
figures are rank 0's: activation peak above the step's start (CPU allocator events in both, as
bench/vs_pytorch.py), model states (parameters, gradients and AdamW moments it holds) and
tokens/s (the tensor group's tokens, counted once).

    .venv/bin/python bench/vs_pytorch_tp.py --cli build/app/rematlab-cli
    .venv/bin/python bench/vs_pytorch_tp.py --tp 2,4 --policies none,every:1
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel, loss_parallel,
                                               parallelize_module)
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_json import last_json  # noqa: E402
from vs_pytorch import RmsNorm, peer_peak_activation, rotary_tables, rotate  # noqa: E402


class SplitAttention(nn.Module):
    """Separate q, k, v projections (a fused one would split across q, k and v by columns)."""

    def __init__(self, d_model, heads, kv_heads, tables):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d_model // heads
        self.tables = tables
        self.q = nn.Linear(d_model, heads * self.hd, bias=False)
        self.k = nn.Linear(d_model, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d_model, kv_heads * self.hd, bias=False)
        self.out = nn.Linear(heads * self.hd, d_model, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, -1, self.hd).transpose(1, 2)  # this rank's heads
        k = self.k(x).view(b, t, -1, self.hd).transpose(1, 2)
        v = self.v(x).view(b, t, -1, self.hd).transpose(1, 2)
        cos, sin = self.tables
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=q.shape[1] != k.shape[1])
        return self.out(y.transpose(1, 2).contiguous().view(b, t, -1))


class SplitSwiGlu(nn.Module):
    def __init__(self, d_model, hidden):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, args, tables):
        super().__init__()
        self.attention_norm = RmsNorm(args.d_model)
        self.attention = SplitAttention(args.d_model, args.heads, args.kv_heads, tables)
        self.mlp_norm = RmsNorm(args.d_model)
        self.mlp = SplitSwiGlu(args.d_model, args.mlp_hidden)

    def forward(self, x):
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, args):
        super().__init__()
        tables = rotary_tables(args.seq_len, args.d_model // args.heads, args.rope_theta)
        self.token = nn.Embedding(args.vocab, args.d_model)
        self.blocks = nn.ModuleList(Block(args, tables) for _ in range(args.layers))
        self.norm = RmsNorm(args.d_model)
        self.head = nn.Linear(args.d_model, args.vocab, bias=False)

    def forward(self, tokens, recompute):
        h = self.token(tokens)
        for block in self.blocks:
            h = checkpoint(block, h, use_reentrant=False) if recompute else block(h)
        return self.head(self.norm(h))


def parallelize(model, mesh, sequence_parallel):
    """PyTorch's tensor-parallel plan for this model (torchtitan's, for Llama)."""
    sp = sequence_parallel
    if sp:
        parallelize_module(model, mesh, {
            "token": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1),
                                    use_local_output=False),
        })
    else:
        parallelize_module(model, mesh, {
            "token": RowwiseParallel(input_layouts=Replicate()),
            "head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
        })
    for block in model.blocks:
        plan = {
            "attention.q": ColwiseParallel(), "attention.k": ColwiseParallel(),
            "attention.v": ColwiseParallel(),
            "attention.out": RowwiseParallel(output_layouts=Shard(1) if sp else Replicate()),
            "mlp.gate": ColwiseParallel(), "mlp.up": ColwiseParallel(),
            "mlp.down": RowwiseParallel(output_layouts=Shard(1) if sp else Replicate()),
        }
        if sp:
            plan.update({
                "attention_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1),),
                                                desired_input_layouts=(Replicate(),)),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),),
                                          desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(block, mesh, plan)


def clip_gradients(parameters, max_norm):
    """clip_grad_norm_ over sharded (DTensor) and replicated (plain: the norms' without sequence
    parallelism) gradients, each element counted once; clip_grad_norm_ refuses the mix."""
    sharded = torch.zeros(())
    whole = torch.zeros(())
    grads = []
    for p in parameters:
        grad = p.grad
        if isinstance(grad, DTensor):
            local = grad.to_local()
            if any(isinstance(placement, Shard) for placement in grad.placements):
                sharded += local.pow(2).sum()
            else:
                whole += local.pow(2).sum()
        else:
            local = grad
            whole += local.pow(2).sum()
        grads.append(local)
    dist.all_reduce(sharded)
    coefficient = max_norm / (float(sharded + whole) ** 0.5 + 1e-6)
    if coefficient < 1.0:
        for grad in grads:
            grad.mul_(coefficient)


def local_bytes(tensor):
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def peer_rank(rank, args, tp, sequence_parallel, policy, port, output):
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=tp)
    mesh = init_device_mesh("cpu", (tp,))
    torch.manual_seed(0)
    model = Llama(args)
    parallelize(model, mesh, sequence_parallel)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len))

    def step():
        with loss_parallel():
            logits = model(tokens, policy == "every:1")
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(0, 1))
            loss.backward()
        clip_gradients(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # as RematLab: gradients stay allocated

    times = []
    for i in range(args.warmup + args.steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    dist.barrier()
    peak = peer_peak_activation(step)
    states = sum(local_bytes(p) for p in model.parameters())
    states += sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
    states += sum(local_bytes(v) for s in optimizer.state.values() for v in s.values()
                  if torch.is_tensor(v) and v.dim() > 0)
    if rank == 0:
        step_s = statistics.median(times)
        with open(output, "w") as out:
            json.dump({"step_ms": 1e3 * step_s, "tokens_per_s": args.batch * args.seq_len / step_s,
                       "peak_activation_bytes": peak, "model_state_bytes": states}, out)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_peer(args, tp, sequence_parallel, policy):
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "rank0.json")
        mp.spawn(peer_rank, args=(args, tp, sequence_parallel, policy, free_port(), output),
                 nprocs=tp, join=True)
        with open(output) as result:
            return json.load(result)


def rematlab_run_command(args, policy, ranks):
    """`rematlab-cli run` of the peers' Llama shape on `ranks` processes, one thread each."""
    return [args.cli, "run", "--arch", "llama", "--kv-heads", str(args.kv_heads),
            "--mlp-hidden", str(args.mlp_hidden), "--tie-head", "false", "--layers",
            str(args.layers), "--d-model", str(args.d_model), "--heads", str(args.heads),
            "--seq-len", str(args.seq_len), "--vocab", str(args.vocab), "--batch",
            str(args.batch), "--steps", str(args.warmup + args.steps), "--warmup-steps",
            str(args.warmup), "--threads", "1", "--checkpoint", policy, "--nproc", str(ranks),
            "--json"]


def add_shape_arguments(parser):
    """The peers' Llama shape and run length, the same flags in both benchmarks."""
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--policies", default="none,every:1", help="none and/or every:1")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--mlp-hidden", type=int, default=704)
    parser.add_argument("--rope-theta", type=float, default=10000.0)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)


def checked_policies(args):
    policies = args.policies.split(",")
    for policy in policies:
        if policy not in ("none", "every:1"):
            raise SystemExit(f"--policies: the peer has no counterpart for '{policy}'")
    return policies


def run_rematlab(args, tp, sequence_parallel, policy):
    command = rematlab_run_command(args, policy, tp) + ["--tp", str(tp)]
    if sequence_parallel:
        command.append("--sequence-parallel")
    return rank0_figures(last_json(command))


def rank0_figures(result):
    """Rank 0's figures from `rematlab-cli run --nproc … --json`, as the peers report theirs."""
    rank = result["ranks"][0]
    return {"step_ms": rank["step_ms"], "tokens_per_s": result["tokens_per_s"],
            "peak_activation_bytes": rank["peak_activation_bytes"],
            "model_state_bytes": rank["param_bytes"] + rank["grad_bytes"] + rank["optimizer_bytes"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tp", default="2,4", help="comma-separated tensor-parallel degrees")
    add_shape_arguments(parser)
    args = parser.parse_args()
    policies = checked_policies(args)
    mib = lambda b: f"{b / 2**20:.2f}"
    print(f"PyTorch {torch.__version__}; llama, {args.layers} blocks, d {args.d_model}, "
          f"{args.heads} heads ({args.kv_heads} key/value), SwiGLU {args.mlp_hidden}, seq "
          f"{args.seq_len}, vocab {args.vocab}, batch {args.batch}, fp32 AdamW; median step of "
          f"{args.steps} after {args.warmup} warm-up, 1 thread per rank; rank 0, MiB")
    print()
    header = ("tp", "sp", "policy", "ours act", "peer act", "act ours/peer", "ours states",
              "peer states", "states ours/peer", "ours tok/s", "peer tok/s", "tok/s ours/peer")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for tp in (int(t) for t in args.tp.split(",")):
        for sequence_parallel in (False, True):
            for policy in policies:
                ours = run_rematlab(args, tp, sequence_parallel, policy)
                peer = run_peer(args, tp, sequence_parallel, policy)
                ratio = lambda key: ours[key] / peer[key]
                print("| " + " | ".join((
                    str(tp), "on" if sequence_parallel else "off", policy,
                    mib(ours["peak_activation_bytes"]), mib(peer["peak_activation_bytes"]),
                    f"{ratio('peak_activation_bytes'):.2f}", mib(ours["model_state_bytes"]),
                    mib(peer["model_state_bytes"]), f"{ratio('model_state_bytes'):.2f}",
                    f"{ours['tokens_per_s']:.0f}", f"{peer['tokens_per_s']:.0f}",
                    f"{ratio('tokens_per_s'):.2f}")) + " |", flush=True)


if __name__ == "__main__":
    main()
