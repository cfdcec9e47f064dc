#!/usr/bin/env python3
"""A mixture of experts' activation peak, predicted by `estimate` and measured by `run`.

    python3 bench/moe_estimate_here.py [--cli build/app/rematlab-cli] [--batch 8] [--steps 2]

For each shape (moe-tiny as it is; with a shared expert and softmax weights, as Qwen 2 MoE; with
8 experts, 4 a token and experts of 192) and policy, `rematlab-cli run … --threads 1 --json`
measures the step's activation peak (fp32, CPU) and `rematlab-cli estimate … --json` predicts it.
No token is dropped (no capacity factor): the prediction assumes every slot taken. Prints
Markdown: measured and predicted MiB and their ratio.
"""
import argparse

from cli_json import last_json

POLICIES = ["none", "every:1", "every:2", "sublayer:1,2", "selective", "keep:router",
            "keep:mlp-in,expert-out", "keep:matmul"]
SHAPES = {
    "moe-tiny": [],
    "moe-tiny, shared 64, softmax": ["--shared-expert-hidden", "64", "--expert-weights", "softmax"],
    "moe-tiny, 8 experts, k 4, width 192": ["--experts", "8", "--experts-per-token", "4",
                                            "--expert-hidden", "192"],
}
MIB = 1024 * 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    print("| shape | policy | measured MiB | predicted MiB | predicted / measured |")
    print("|---|---|---:|---:|---:|")
    for shape, flags in SHAPES.items():
        for policy in POLICIES:
            common = ["--preset", "moe-tiny", *flags, "--batch", str(args.batch),
                      "--checkpoint", policy, "--json"]
            measured = last_json([args.cli, "run", *common, "--steps", str(args.steps),
                                  "--threads", "1"])["peak_activation_bytes"]
            predicted = last_json([args.cli, "estimate", *common])["activation_peak_bytes"]
            print(f"| {shape} | `{policy}` | {measured / MIB:.2f} | {predicted / MIB:.2f} | "
                  f"{predicted / measured:.3f} |")


if __name__ == "__main__":
    main()
