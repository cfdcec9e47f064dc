#!/usr/bin/env python3
"""RematLab's fully sharded parameters against PyTorch's own (FSDP2), side by side.

The peer is the Llama of bench/vs_pytorch_tp.py (same shape, untied head) with every block and
then the whole model wrapped by torch.distributed.fsdp.fully_shard, PyTorch's FSDP2: parameters,
gradients and AdamW moments sharded over the ranks, each block gathered for its forward and
again for its backward, the root (embedding, final norm, head) kept whole through the step as
FSDP2 keeps a root. every:1 is torch.utils.checkpoint (non-reentrant) over each block, inside
its FSDP unit. Both sides run D processes on Gloo over 127.0.0.1, each with `--batch` rows of the
global batch, the same steps, warm-up and one thread per rank; the figures are rank 0's:
activation peak above the step's start (CPU allocator events in both, as bench/vs_pytorch.py;
for both it includes the parameters gathered whole and the gradients before they are reduced),
model states it holds between steps, and tokens/s of all ranks together.

    .venv/bin/python bench/vs_pytorch_fsdp.py --cli build/app/rematlab-cli
    .venv/bin/python bench/vs_pytorch_fsdp.py --ranks 2 --policies none
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_json import last_json  # noqa: E402
from vs_pytorch import peer_peak_activation  # noqa: E402
from vs_pytorch_tp import (Llama, add_shape_arguments, checked_policies, free_port,  # noqa: E402
                           local_bytes, rank0_figures, rematlab_run_command)


def peer_rank(rank, args, ranks, policy, port, output):
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=ranks)
    mesh = init_device_mesh("cpu", (ranks,))
    torch.manual_seed(0)
    model = Llama(args)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    torch.manual_seed(1 + rank)  # each rank its own rows
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len))

    def step():
        logits = model(tokens, policy == "every:1")
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(0, 1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # as RematLab: gradient shards stay allocated

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
            json.dump({"step_ms": 1e3 * step_s,
                       "tokens_per_s": ranks * args.batch * args.seq_len / step_s,
                       "peak_activation_bytes": peak, "model_state_bytes": states}, out)
    dist.destroy_process_group()


def run_peer(args, ranks, policy):
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "rank0.json")
        mp.spawn(peer_rank, args=(args, ranks, policy, free_port(), output), nprocs=ranks,
                 join=True)
        with open(output) as result:
            return json.load(result)


def run_rematlab(args, ranks, policy):
    return rank0_figures(
        last_json(rematlab_run_command(args, policy, ranks) + ["--shard", "parameters"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,4", help="comma-separated data-parallel degrees")
    add_shape_arguments(parser)
    args = parser.parse_args()
    policies = checked_policies(args)
    mib = lambda b: f"{b / 2**20:.2f}"
    print(f"PyTorch {torch.__version__}; llama, {args.layers} blocks, d {args.d_model}, "
          f"{args.heads} heads ({args.kv_heads} key/value), SwiGLU {args.mlp_hidden}, seq "
          f"{args.seq_len}, vocab {args.vocab}, batch {args.batch} per rank, fp32 AdamW; median "
          f"step of {args.steps} after {args.warmup} warm-up, 1 thread per rank; rank 0, MiB")
    print()
    header = ("ranks", "policy", "ours act", "peer act", "act ours/peer", "ours states",
              "peer states", "states ours/peer", "ours tok/s", "peer tok/s", "tok/s ours/peer")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for ranks in (int(r) for r in args.ranks.split(",")):
        for policy in policies:
            ours = run_rematlab(args, ranks, policy)
            peer = run_peer(args, ranks, policy)
            ratio = lambda key: ours[key] / peer[key]
            print("| " + " | ".join((
                str(ranks), policy,
                mib(ours["peak_activation_bytes"]), mib(peer["peak_activation_bytes"]),
                f"{ratio('peak_activation_bytes'):.2f}", mib(ours["model_state_bytes"]),
                mib(peer["model_state_bytes"]), f"{ratio('model_state_bytes'):.2f}",
                f"{ours['tokens_per_s']:.0f}", f"{peer['tokens_per_s']:.0f}",
                f"{ratio('tokens_per_s'):.2f}")) + " |", flush=True)


if __name__ == "__main__":
    main()
