#!/usr/bin/env python3
"""Per-rank memory under fully sharded parameters (--shard parameters), measured and predicted:
2 and 4 ranks (or TP T × D data ranks), for none, selective and every:1.

    python3 bench/sharded_parameters_table.py --cli build/app/rematlab-cli --preset small
    python3 bench/sharded_parameters_table.py --preset small --tp 2 --nproc 4

Each cell is a real `rematlab-cli run --nproc D --shard parameters --json`; the ranks share this
host's cores. Bytes are rank 0's: the parameters it keeps between steps against its tensor
part of the model (the whole model without --tp) divided by its D data ranks, its model states (parameters, gradients, AdamW state), the allocator's peak, and
what `rematlab-cli estimate --nproc D --shard parameters` predicts for that peak (model states +
the whole units and gradients it gathers + activations) with the ratio predicted / measured.
*Units held* is the most whole units and gradients the rank held at once (`buffer_peak_bytes`)
beside the estimator's `gathered_bytes`.
Gathers are the all-gathers of parameter units in one step, and how many recomputation added.
"""
import argparse

from cli_json import last_json


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks")
    parser.add_argument("--nproc", default="2,4", help="ranks in all, comma-separated")
    args = parser.parse_args()
    mib = lambda b: f"{b / 2**20:.2f}"
    print(f"{args.preset}, batch {args.batch} per data rank, fp32 AdamW, TP {args.tp}, "
          f"{args.steps} steps (1 warm-up), {args.threads} thread(s) per rank; MiB, rank 0")
    print()
    print("| ranks | policy | parameters | part ÷ D | model states | predicted | "
          "units held | predicted | peak | predicted | pred/meas | gathers (recompute) | "
          "step ms | comm ms |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for ranks in (int(n) for n in args.nproc.split(",")):
        for policy in ("none", "selective", "every:1"):
            common = ["--batch", str(args.batch), "--checkpoint", policy, "--nproc", str(ranks),
                      "--tp", str(args.tp), "--shard", "parameters", "--json"]
            result = last_json([args.cli, "run", "--preset", args.preset, "--steps",
                                str(args.steps), "--threads", str(args.threads)] + common)
            predicted = last_json([args.cli, "estimate", "--model", args.preset] + common)
            rank = result["ranks"][0]
            states = rank["param_bytes"] + rank["grad_bytes"] + rank["optimizer_bytes"]
            predicted_peak = (predicted["model_state_bytes"] + predicted["gathered_bytes"] +
                              predicted["activation_peak_bytes"])
            part = predicted["rank_params"] * 4
            data_ranks = ranks // args.tp
            print(f"| {ranks} | {policy} | {mib(rank['param_bytes'])} | {mib(part / data_ranks)} | "
                  f"{mib(states)} | {mib(predicted['model_state_bytes'])} | "
                  f"{mib(rank['buffer_peak_bytes'])} | {mib(predicted['gathered_bytes'])} | "
                  f"{mib(rank['peak_bytes'])} | {mib(predicted_peak)} | "
                  f"{predicted_peak / rank['peak_bytes']:.3f} | {result['parameter_gathers']} "
                  f"({result['recompute_gathers']}) | {rank['step_ms']:.1f} | "
                  f"{rank['comm_ms']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
