#!/usr/bin/env python3
"""LoRA on a frozen base stored in fp32, bf16, int8 and nf4, side by side from rematlab-cli runs:
the base's bytes, the activation peak against the estimate, and the step time that dequantising
costs, with and without every block recomputed.

    python3 bench/base_precision_table.py --cli build/app/rematlab-cli --threads 1 [--precision fp32]
"""
import argparse

from cli_json import last_json


def flags(args, base, checkpoint):
    return ["--preset", args.preset, "--batch", str(args.batch), "--precision", args.precision,
            "--finetune", "lora", "--base-precision", base, "--checkpoint", checkpoint]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--preset", default="llama-small")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", default="bf16", help="bf16 (autocast) or fp32")
    args = parser.parse_args()
    print(f"{args.preset}, LoRA rank 16 on every projection, {args.precision}, batch {args.batch}, "
          f"{args.threads} thread(s), median of {args.steps - args.warmup} steps after "
          f"{args.warmup} warm-up")
    print("| checkpoint | base | model states MiB | peak act MiB | estimate / measured | "
          "step ms | × fp32 base | final loss |")
    print("|---|---|---|---|---|---|---|---|")
    for checkpoint in ("none", "every:1"):
        reference = None
        # A bf16 base is read by bf16 matmuls only.
        bases = ("fp32", "bf16", "int8", "nf4") if args.precision == "bf16" else ("fp32", "int8", "nf4")
        for base in bases:
            r = last_json([args.cli, "run", *flags(args, base, checkpoint), "--steps",
                           str(args.steps), "--warmup-steps", str(args.warmup), "--threads",
                           str(args.threads), "--json"])
            e = last_json([args.cli, "estimate", *flags(args, base, checkpoint), "--json"])
            reference = reference or r["step_ms"]
            print(f"| {checkpoint} | {base} | {r['baseline_bytes'] / 2**20:.1f} | "
                  f"{r['peak_activation_bytes'] / 2**20:.1f} | "
                  f"{e['activation_peak_bytes'] / r['peak_activation_bytes']:.3f} | "
                  f"{r['step_ms']:.0f} | {r['step_ms'] / reference:.2f} | "
                  f"{r['final_loss']:.6f} |", flush=True)


if __name__ == "__main__":
    main()
