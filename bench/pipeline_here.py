#!/usr/bin/env python3
"""Pipeline stages measured on this machine against what the layout planner predicts for them.

    python3 bench/pipeline_here.py [--cli build/app/rematlab-cli] [--stages 2] [--accum 4]
                                   [--virtual-stages 1] [--data-ranks 1 --zero 0]
                                   [--policies none,every:1,plan:120MiB] [--keep FILE]

Each model and policy runs as `rematlab-cli run --nproc P --pp P --virtual-stages V --accum M …
--steps 4 --threads 1 --json` (1F1B, or interleaved with V > 1; one stage a rank) and is
evaluated by `layout` with the same degrees and policy fixed (plan:BUDGET as the stages: list it
chose, each stage planned for its micro-batches in flight) and this machine described by its
matmul peak and Gloo link as layout_here.py measures them, the share of the peak one process
reaches as efficiency (stages divide blocks, each whole, so every part of the step scales with
the matmuls), nothing overlapped. Per stage: the peak (activations above the model states, and
the states), measured and predicted; then the step; each stage's bubble (a rank idle until a
neighbouring stage reached a message: the fill, the drain, a slower stage's pace, and the
stages' meeting at the gradient norm), measured as the longest its ranks idled and predicted as
the planner's for the stage (the orders walked, its own micro-batches taken off), also as a
share of the step; and each rank's transfers (blocked while an activation or gradient passed,
once sent) against the planner's pipeline transfers. Prints Markdown. Run it on an idle
machine. With --data-ranks D the run has D pipelines, each stage's D ranks averaging their
gradients and, with --zero 1 or 2, sharding their optimizer states (and gradients); each
stage's row is its rank that peaked highest.

With more ranks than cores the ranks time-share them. The layout is planned with a core a rank;
the step predicted is then the longer of that step and an idealised bound of the cores' work:
every rank busy for the planned step less its bubble, over the cores, as if the cores never
idled while a rank could run (a rank idling in its bubble leaves its core to another). It errs
both ways: the fill and drain leave cores idle (the step is longer), while the lighter stages
are counted at the slowest's time and the collectives' latencies as work (shorter). Each
stage's bubble predicted is its planned share of that step: an assumption (a rank may also wait
on a neighbour waiting for a core), not derived. layout_here.py, whose ranks all compute at
once, gives each rank its share of the cores, the same bound without a bubble.
"""
import argparse
import json
import os
import sys
import tempfile

from cli_json import last_json
from layout_here import gloo_link


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--python", default=".venv/bin/python")
    parser.add_argument("--presets", default="small,llama-small")
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--accum", type=int, default=4)
    parser.add_argument("--virtual-stages", type=int, default=1)
    parser.add_argument("--data-ranks", type=int, default=1)
    parser.add_argument("--zero", type=int, default=0, choices=[0, 1, 2])
    parser.add_argument("--bucket-size", default="25MiB",
                        help="a stage's data ranks' gradient buckets, in run and layout alike "
                        "(default: the engine's)")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--policies", default="none,every:1")
    parser.add_argument("--keep", metavar="FILE",
                        help="append each run's, the one process's and the layout's JSON to FILE")
    parser.add_argument("--lora", metavar="BASE", choices=["fp32", "bf16", "int8", "nf4"],
                        help="fine-tune rank-16 LoRA adapters over a frozen base stored so, in run "
                        "and layout alike")
    args = parser.parse_args()
    for flag, value in (("--stages", args.stages), ("--accum", args.accum),
                        ("--virtual-stages", args.virtual_stages), ("--data-ranks", args.data_ranks)):
        if value < 1:  # before anything is measured; `run` says what else a layout needs
            print(f"pipeline_here.py: {flag}: must be at least 1, got {value}", file=sys.stderr)
            raise SystemExit(2)
    stages, accum, chunks = args.stages, args.accum, args.virtual_stages
    data_ranks = args.data_ranks
    ranks = stages * data_ranks
    shard = ["none", "optimizer", "gradients"][args.zero]
    cores = len(os.sched_getaffinity(0))  # the cores this process may run on
    with tempfile.TemporaryDirectory() as scratch:  # measured now, kept nowhere
        peak = last_json([args.cli, "peak", "--threads", "1", "--json", "--db",
                          os.path.join(scratch, "runs.sqlite")])["peak_flops"]
    bandwidth, fixed_latency, step_latency = gloo_link(args.python)
    link = bandwidth[min(4, max(2, ranks))]
    print(f"one rank's peak {peak / 1e9:.1f} GFLOP/s (fp32, 1 thread), {cores} cores; Gloo "
          f"bandwidth {link / 1e9:.2f} GB/s; {stages} stages of {chunks} chunks, {accum} "
          f"micro-batches of {args.batch} × {args.seq_len} tokens; {data_ranks} data rank(s), "
          f"ZeRO {args.zero}\n")
    print("| model | policy | stage | peak meas. / pred. MiB | ratio | above the states meas. / "
          "pred. MiB | states meas. / pred. MiB | step meas. / pred. ms | ratio | bubble "
          "meas. / pred. ms | share of the step meas. / pred. | transfers meas. / pred. ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    mib = 1024 * 1024
    for preset in args.presets.split(","):
        for policy in args.policies.split(","):
            tuning = ["--finetune", "lora", "--base-precision", args.lora] if args.lora else []
            common = ["--preset", preset] + tuning + ["--seq-len", str(args.seq_len), "--batch",
                      str(args.batch), "--checkpoint", policy, "--steps", "4", "--threads", "1"]
            measured = last_json([args.cli, "run"] + common + [
                "--nproc", str(ranks), "--pp", str(stages), "--virtual-stages", str(chunks),
                "--accum", str(accum), "--shard", shard, "--bucket-size", args.bucket_size, "--json"])
            # plan:BUDGET is evaluated as what it chose for each model chunk (a stages: list,
            # which one process runs too, its blocks split as the pipeline's).
            asked = policy
            if policy.startswith("plan:"):
                policy = measured.get("plan", {}).get("chosen", "")
                if not policy or "ranks" not in measured:
                    print(f"| {preset} | {asked}: no plan fits (status "
                          f"{measured.get('status')}) |")
                    continue
                common[common.index("--checkpoint") + 1] = policy
            one = last_json([args.cli, "run"] + common + ["--accum", str(accum), "--peak-flops",
                                                          str(peak), "--json"])
            plan = last_json([
                args.cli, "layout", "--model", preset] + tuning + ["--seq-len", str(args.seq_len),
                "--gpu-memory", "16GiB", "--peak-flops", str(peak),
                "--efficiency", str(one["hfu"]), "--intra-node-bandwidth", str(link),
                "--inter-node-bandwidth", str(link), "--collective-latency", str(fixed_latency),
                "--intra-node-latency", str(step_latency), "--no-overlap", "--gpus", str(ranks),
                "--gpus-per-node", str(ranks), "--global-batch",
                str(args.batch * accum * data_ranks),
                "--precision", "fp32", "--fragmentation", "0", "--bucket-size", args.bucket_size,
                "--tp", "1", "--pp", str(stages),
                "--virtual-stages", str(chunks), "--cp", "1", "--dp", str(data_ranks), "--zero", str(args.zero),
                "--micro-batch", str(args.batch), "--checkpoint", policy, "--offload", "none",
                "--json"])
            if args.keep:
                with open(args.keep, "a") as kept:
                    kept.write(json.dumps({"preset": preset, "policy": asked, "peak": peak,
                                           "link": link, "cores": cores, "one": one,
                                           "measured": measured, "layout": plan}) + "\n")
            best = plan["layouts"][0]
            parts = best["time_s"]
            step_pred = 1000 * max(best["step_s"],
                                   ranks / cores * (best["step_s"] - parts["bubble"]))
            step_ratio = measured["step_ms"] / step_pred
            # Stage s is ranks [s·D, (s+1)·D): the one that peaked highest stands for it.
            fullest = [max((r for r in measured["ranks"] if r["rank"] // data_ranks == s),
                           key=lambda r: r["peak_bytes"]) for s in range(stages)]
            for rank, stage in zip(fullest, best["stages"]):
                # Each stage idles its own time (a faster stage waits on a slower one's pace):
                # its ranks' longest against the planner's for the stage, as a share of the step.
                bubble = max(r["bubble_ms"] for r in measured["ranks"]
                             if r["rank"] // data_ranks == rank["rank"] // data_ranks)
                bubble_pred = step_pred * stage["idle_s"] / best["step_s"]
                memory = stage["memory_bytes"]
                states = (memory["weights"] + memory["gradients"] + memory["master"]
                          + memory["optimizer"])
                named = policy if asked == policy else f"{asked}: {policy}"
                print(f'| {preset} | {named} | {rank["rank"] // data_ranks} of {stages} '
                      f'| {rank["peak_bytes"] / mib:.1f} / {memory["total"] / mib:.1f} '
                      f'| {rank["peak_bytes"] / memory["total"]:.3f} '
                      f'| {rank["peak_activation_bytes"] / mib:.1f} / '
                      f'{(memory["activations"] + memory["buffers"]) / mib:.1f} '
                      f'| {rank["model_state_bytes"] / mib:.1f} / {states / mib:.1f} '
                      f'| {measured["step_ms"]:.0f} / {step_pred:.0f} '
                      f'| {step_ratio:.2f} | {bubble:.0f} / {bubble_pred:.0f} '
                      f'| {bubble / measured["step_ms"]:.2f} / '
                      f'{bubble_pred / step_pred:.2f} '
                      f'| {rank["transfer_ms"]:.1f} / {1000 * parts["pipeline"]:.1f} |')
            sys.stdout.flush()


if __name__ == "__main__":
    main()
