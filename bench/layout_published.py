#!/usr/bin/env python3
"""The layout planner's step time against published large training runs.

    python3 bench/layout_published.py [--cli build/app/rematlab-cli] [--runs bench/published_runs.json]

Each run in published_runs.json (Megatron-LM 2021, Korthikanti et al. 2022, MT-NLG, Llama 3,
Megatron-Core on H100; the file cites each) is evaluated with its own degrees, micro-batch and
recompute fixed (`rematlab-cli layout --tp … --pp … --json`), in its precision with fp32
gradients as Megatron-LM keeps them, on the GPU kind's datasheet figures and default matmul
efficiency. What a source leaves unsaid (micro-batch, virtual stages, recompute) the planner
chooses, and the table says so. Prints a Markdown table: reported and predicted iteration time,
the error, and the MFU of each (model FLOPs 6·N·tokens + attention, as `layout` counts them).
"""
import argparse
import json
import os
import sys

from cli_json import last_json


def layout_flags(run):
    model, layout = run["model"], run["layout"]
    gated = model.get("gated_mlp")
    flags = [
        "--model", "llama3-405b" if gated else "gpt3-175b",
        "--layers", model["layers"], "--d-model", model["hidden"], "--heads", model["heads"],
        "--kv-heads", model.get("kv_heads") or model["heads"], "--mlp-hidden", model["ffn"],
        "--vocab", model["vocab"], "--seq-len", model["seq_len"],
        "--gpu", run["gpu"], "--gpus", run["gpus"], "--gpus-per-node", run.get("gpus_per_node") or 8,
        "--global-batch", layout["global_batch"], "--fp32-gradients", "--offload", "none",
        "--tp", layout["tp"], "--pp", layout["pp"], "--cp", layout.get("cp") or 1,
        "--dp", layout["dp"], "--zero", 1 if layout.get("zero") else 0, "--top", 1,
    ]
    chosen = []
    if layout.get("vp"):
        flags += ["--virtual-stages", layout["vp"]]
    else:
        chosen.append("virtual stages")
    if layout.get("micro_batch"):
        flags += ["--micro-batch", layout["micro_batch"]]
    else:
        chosen.append("micro-batch")
    recompute = layout.get("recompute")
    if recompute:
        flags += ["--checkpoint", {"none": "none", "selective": "selective", "full": "every:1"}[recompute]]
    else:
        chosen.append("recompute")
    if layout.get("sp") is None:
        chosen.append("sequence parallelism")
    else:
        flags.append("--sequence-parallel" if layout["sp"] else "--no-sequence-parallel")
    return [str(f) for f in flags], chosen


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--runs", default=os.path.join(here, "published_runs.json"))
    args = parser.parse_args()
    runs = json.load(open(args.runs))["runs"]
    print("| run | GPUs | layout | reported s | predicted s | error | reported MFU | predicted MFU | fits | planner chose |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    errors = []
    for run in runs:
        flags, chosen = layout_flags(run)
        answer = last_json([args.cli, "layout", *flags, "--json"])
        best = answer["layouts"][0]
        reported = run["reported"]["iteration_s"]
        predicted = best["step_s"]
        error = predicted / reported - 1.0
        errors.append(abs(error))
        mfu = run["reported"].get("mfu")
        name = f'TP{best["tp"]}{"+SP" if best["sp"] else ""} PP{best["pp"]}×{best["vp"]} ' \
               f'CP{best["cp"]} DP{best["dp"]} b{best["micro_batch"]} {best["checkpoint"].split("|")[0]}'
        source = "" if run["reported"].get("iteration_s_source") == "reported" else " (derived)"
        print(f'| {run["name"]} | {run["gpus"]} | {name} | {reported:.2f}{source} | {predicted:.2f} | '
              f'{100 * error:+.0f} % | {"" if mfu is None else f"{100 * mfu:.1f} %"} | '
              f'{100 * best["mfu"]:.1f} % | {"yes" if best["fits"] else "no: " + best.get("reason", "")} | '
              f'{", ".join(chosen)} |')
    errors.sort()
    print(f"\nmedian |error| {100 * errors[len(errors) // 2]:.0f} %, largest {100 * errors[-1]:.0f} % over {len(errors)} runs")


if __name__ == "__main__":
    sys.exit(main())
