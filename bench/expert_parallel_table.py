#!/usr/bin/env python3
"""Expert parallelism against data parallelism over the same ranks, side by side in one run.

    python3 bench/expert_parallel_table.py --cli build/app/rematlab-cli
    python3 bench/expert_parallel_table.py --layouts 2:1:2,2:1:2sp,4:1:2sp,4:1:4sp

Each row is a real `rematlab-cli run --nproc N [--ep E] [--tp T [--sequence-parallel]] --json`
of one mixture-of-experts shape
(moe-tiny refined by the flags below), fp32 AdamW on the CPU, one thread a rank. Per rank: the
model states it holds between steps (largest over ranks) against `estimate --nproc N --ep E`, the
peak (largest over ranks), the all-to-all time (median step, largest over ranks) within its
waits; the estimated peak, balanced, at the run's rank load alone (`estimate --expert-rank-load`)
and at every load it recorded (with `--expert-block-load` and `--expert-load`); for the run:
tokens/s, the final loss, the busiest expert's load (the most rows one expert took in one
block's forward over its even share), the fullest rank's (the rows its experts took in a step
over its own tokens' rows) and its busiest block's (the same in one block's forward), each the
largest over the run's steps, from the runs database. `--checkpoint` takes a comma-separated
list of policies, each a row per layout; `--layouts` a comma-separated list of N:E[:T[sp]]
(ranks, expert ranks, tensor ranks, sequence parallelism).
"""
import argparse
import os
import re
import sqlite3
import sys
import tempfile

from cli_json import last_json


def shape_flags(args):
    return ["--layers", str(args.layers), "--d-model", str(args.d_model), "--heads", "8",
            "--kv-heads", "4", "--seq-len", str(args.seq_len), "--vocab", "256",
            "--experts", str(args.experts), "--expert-hidden", str(args.expert_hidden)]


def most_loads(db, run_id):
    """The busiest expert's load, the fullest rank's and its busiest block's (None without --ep:
    stored as 'nan'), each the largest over the run's steps."""
    with sqlite3.connect(db) as connection:
        return connection.execute(
            "SELECT max(expert_load), max(CASE WHEN typeof(expert_rank_load) = 'real' "
            "THEN expert_rank_load END), max(CASE WHEN typeof(expert_block_load) = 'real' "
            "THEN expert_block_load END) FROM steps WHERE run_id = ?", (run_id,)).fetchone()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--expert-hidden", type=int, default=512)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--checkpoint", default="none")
    parser.add_argument("--layouts", default="2:1,2:2,4:1,4:2,4:4")
    args = parser.parse_args()
    for layout in args.layouts.split(","):
        layout_flags(layout)  # every layout read before anything runs
    print(f"moe-tiny refined: {args.layers} blocks, d {args.d_model}, {args.experts} experts of "
          f"SwiGLU {args.expert_hidden}, 2 a token, seq {args.seq_len}, batch {args.batch} per "
          f"rank, fp32 AdamW, {args.steps} steps (1 warm-up), 1 thread a rank")
    print()
    print("| ranks | ep | tp | policy | model states MiB | estimate MiB | peak MiB | peak estimate MiB, "
          "balanced | at rank load | at recorded loads | ratio | tok/s | all-to-all ms | "
          "waited ms | step ms | final loss | expert load | rank load | block load |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        db = os.path.join(scratch, "runs.db")
        for layout in args.layouts.split(","):
            for policy in args.checkpoint.split(","):
                print_row(args, db, layout, policy)


def layout_flags(layout):
    """--nproc, --ep, --tp and --sequence-parallel of an N:E[:T[sp]] layout, and its tp column."""
    parts = layout.split(":")
    tensor = parts[2] if len(parts) > 2 else "1"
    sp = tensor.endswith("sp")
    tp = tensor[:-2] if sp else tensor
    if len(parts) not in (2, 3) or not all(re.fullmatch(r"[1-9][0-9]*", p) for p in parts[:2] + [tp]):
        print(f"expert_parallel_table.py: --layouts: '{layout}' is not N:E or N:E:T[sp] "
              "(e.g. 4:1:2sp)", file=sys.stderr)
        raise SystemExit(2)
    flags = ["--nproc", parts[0], "--ep", parts[1], "--tp", tp]
    return flags + (["--sequence-parallel"] if sp else []), tp + ("+SP" if sp else "")


def print_row(args, db, layout, policy):
    mib = lambda b: f"{b / 2**20:.2f}"
    flags, tp = layout_flags(layout)
    ranks, ep = layout.split(":")[:2]
    command = [args.cli, "run", "--preset", "moe-tiny", *shape_flags(args), "--batch",
               str(args.batch), "--steps", str(args.steps), "--checkpoint", policy, "--threads",
               "1", *flags, "--db", db, "--json"]
    run = last_json(command)
    load, rank_load, block_load = most_loads(db, run["run_id"])
    asked = [args.cli, "estimate", "--model", "moe-tiny", *shape_flags(args), "--batch",
             str(args.batch), "--checkpoint", policy, *flags, "--json"]
    estimate = last_json(asked)
    at_rank = asked + (["--expert-rank-load", repr(rank_load)] if rank_load else [])
    at_rank_load = last_json(at_rank)
    recorded = last_json(at_rank + ["--expert-load", repr(load)] +
                         (["--expert-block-load", repr(block_load)] if block_load else []))
    states = max(r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"] for r in run["ranks"])
    peak = max(r["peak_bytes"] for r in run["ranks"])
    dispatch = max(r["dispatch_ms"] for r in run["ranks"])
    waited = max(r["comm_wait_ms"] for r in run["ranks"])
    loads = f"{load:.2f} | " + (f"{rank_load:.3f} | {block_load:.3f}" if rank_load else "– | –")
    print(f"| {ranks} | {ep} | {tp} | `{policy}` | {mib(states)} | {mib(estimate['model_state_bytes'])} | "
          f"{mib(peak)} | {mib(estimate['total_bytes'])} | {mib(at_rank_load['total_bytes'])} | "
          f"{mib(recorded['total_bytes'])} | {peak / recorded['total_bytes']:.3f} | "
          f"{run['tokens_per_s']:.0f} | {dispatch:.1f} | {waited:.1f} | "
          f"{run['step_ms']:.1f} | {run['final_loss']:.4f} | {loads} |", flush=True)


if __name__ == "__main__":
    main()
