#!/usr/bin/env python3
"""Per-rank memory of data-parallel runs: --shard none|optimizer|gradients at 1, 2 and 3 ranks.

    python3 bench/dist_memory_table.py --cli build/app/rematlab-cli --preset small

Each cell is a real `rematlab-cli run --nproc N --shard S --json` (one process, no launcher, for
N = 1 with --shard none). Bytes are rank 0's: the model states it holds between steps (parameters,
gradients, AdamW state; unique storages), the allocator's live bytes when a step begins
(baseline) and its peak, and what `estimate --nproc N --shard S` predicts for the model states.
"""
import argparse

from cli_json import last_json


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--checkpoint", default="every:1")
    args = parser.parse_args()
    mib = lambda b: f"{b / 2**20:.2f}"
    print(f"{args.preset}, batch {args.batch} per rank, {args.checkpoint}, fp32 AdamW, "
          f"{args.steps} steps (1 warm-up); MiB, rank 0")
    print()
    print("| ranks | shard | parameters | gradients | optimizer | model states | estimate | "
          "baseline (allocator) | peak | comm ms | hidden ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for ranks in (1, 2, 3):
        for shard in ("none", "optimizer", "gradients"):
            command = [args.cli, "run", "--preset", args.preset, "--batch", str(args.batch),
                       "--steps", str(args.steps), "--checkpoint", args.checkpoint,
                       "--shard", shard, "--json"]
            if ranks > 1:
                command += ["--nproc", str(ranks)]
            run = last_json(command)
            estimate = last_json([args.cli, "estimate", "--model", args.preset, "--nproc",
                                  str(ranks), "--shard", shard, "--json"])
            if run.get("ranks"):
                r = run["ranks"][0]
                states = (r["param_bytes"], r["grad_bytes"], r["optimizer_bytes"])
                comm = (f"{r['comm_ms']:.1f}", f"{r['comm_hidden_ms']:.1f}")
            else:  # one process, no exchange: weights, gradients and AdamW's two moments
                states = (run["params"] * 4, run["params"] * 4, run["params"] * 8)
                comm = ("-", "-")
            print(f"| {ranks} | {shard} | {mib(states[0])} | {mib(states[1])} | {mib(states[2])} | "
                  f"{mib(sum(states))} | {mib(estimate['model_state_bytes'])} | "
                  f"{mib(run['baseline_bytes'])} | {mib(run['peak_bytes'])} | {comm[0]} | {comm[1]} |",
                  flush=True)


if __name__ == "__main__":
    main()
