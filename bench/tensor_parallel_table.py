#!/usr/bin/env python3
"""Per-rank memory and time under tensor and sequence parallelism, measured and predicted: --tp 1,
2, 4, with and without --sequence-parallel, for none, selective and every:1.

    python3 bench/tensor_parallel_table.py --cli build/app/rematlab-cli --preset small

Each cell is a real `rematlab-cli run --nproc T --tp T --json` (one process for T = 1); the ranks
share this host's cores, so step times compare layouts only where ranks do not outnumber cores.
Bytes are rank 0's: its activation peak above the model states, the model states it holds
(parameters, gradients, AdamW state), and the allocator's peak; `÷` is the activation peak's
ratio to the single process's under the same policy. Beside each measured figure, what
`rematlab-cli estimate` predicts for the same rank (`--tp T [--sequence-parallel]`) and the ratio
predicted / measured.
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
    args = parser.parse_args()
    mib = lambda b: f"{b / 2**20:.2f}"
    print(f"{args.preset}, batch {args.batch}, fp32 AdamW, {args.steps} steps (1 warm-up), "
          f"{args.threads} thread(s) per rank; MiB, rank 0")
    print()
    print("| policy | tp | sp | activation peak | ÷ | predicted | pred/meas | model states | "
          "predicted | peak | step ms | comm ms |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for policy in ("none", "selective", "every:1"):
        alone = None
        for tp in (1, 2, 4):
            for sp in ((False,) if tp == 1 else (False, True)):
                command = [args.cli, "run", "--preset", args.preset, "--batch", str(args.batch),
                           "--steps", str(args.steps), "--checkpoint", policy,
                           "--threads", str(args.threads), "--json"]
                if tp > 1:
                    command += ["--nproc", str(tp), "--tp", str(tp)]
                if sp:
                    command.append("--sequence-parallel")
                result = last_json(command)
                layout = ["--tp", str(tp)] + (["--sequence-parallel"] if sp else [])
                predicted = last_json([args.cli, "estimate", "--model", args.preset, "--batch",
                                       str(args.batch), "--checkpoint", policy, "--json"] + layout)
                rank = result["ranks"][0] if result.get("ranks") else None
                activations = result["peak_activation_bytes"] if rank is None \
                    else rank["peak_activation_bytes"]
                if tp == 1:
                    alone = activations
                    states = result["baseline_bytes"]
                else:
                    states = rank["param_bytes"] + rank["grad_bytes"] + rank["optimizer_bytes"]
                peak = result["peak_bytes"] if rank is None else rank["peak_bytes"]
                step = result["step_ms"] if rank is None else rank["step_ms"]
                comm = 0.0 if rank is None else rank["comm_ms"]
                predicted_activations = predicted["activation_peak_bytes"]
                print(f"| {policy} | {tp} | {'on' if sp else 'off'} | {mib(activations)} | "
                      f"{alone / activations:.2f} | {mib(predicted_activations)} | "
                      f"{predicted_activations / activations:.3f} | {mib(states)} | "
                      f"{mib(predicted['model_state_bytes'])} | {mib(peak)} | {step:.1f} | "
                      f"{comm:.1f} |", flush=True)


if __name__ == "__main__":
    main()
