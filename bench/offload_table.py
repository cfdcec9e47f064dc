#!/usr/bin/env python3
"""Offload on the CPU: none, every:1 and every:1 + disk side by side, from rematlab-cli runs.

    python3 bench/offload_table.py --cli build/app/rematlab-cli --threads 2
"""
import argparse

from cli_json import last_json


def run(cli, args, checkpoint, offload):
    command = [cli, "run", "--preset", args.preset, "--batch", str(args.batch), "--steps",
               str(args.steps), "--warmup-steps", str(args.warmup), "--threads", str(args.threads),
               "--checkpoint", checkpoint, "--offload", offload, "--json"]
    return last_json(command)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    rows = [("none", "none"), ("every:1", "none"), ("every:1", "disk")]
    print(f"{args.preset}, batch {args.batch}, {args.threads} threads, median of {args.steps - args.warmup} "
          f"steps after {args.warmup} warm-up")
    print("| checkpoint | offload | peak act MiB | offloaded peak MiB | tokens/s | step ms | offload wait ms | final loss |")
    print("|---|---|---|---|---|---|---|---|")
    for checkpoint, offload in rows:
        r = run(args.cli, args, checkpoint, offload)
        print(f"| {checkpoint} | {offload} | {r['peak_activation_bytes'] / 2**20:.1f} | "
              f"{r['offloaded_peak_bytes'] / 2**20:.1f} | {r['tokens_per_s']:.0f} | {r['step_ms']:.0f} | "
              f"{r['offload_wait_ms']:.1f} | {r['final_loss']:.6f} |", flush=True)


if __name__ == "__main__":
    main()
