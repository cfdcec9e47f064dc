#!/usr/bin/env python3
"""A pipeline's per-stage plan against the best uniform policy under one per-GPU budget.

    python3 bench/stage_plan_here.py [--cli build/app/rematlab-cli] [--presets small,llama-small]
                                     [--layouts 2x1,4x1,2x2] [--accum 4] [--budget-at 0.5]
                                     [--steps 5] [--rounds 2]

For each model and layout PxV (P stages of V chunks, one stage a rank), everything runs as
`rematlab-cli run --nproc P --pp P --virtual-stages V --accum M … --threads 1 --json`, one after
another. The budget (activations above each rank's model states) lies --budget-at of the way from
the smallest budget some per-stage plan fits (what plan:1KiB answers) to the fullest stage's
measured peak without checkpointing. Then plan:BUDGET runs (each stage planned for the
micro-batches it holds in flight), and so does every uniform policy: one policy for every stage.
A uniform policy fits when every stage's measured activation peak is within the budget. Then the
plan and every uniform policy that fits are timed in --rounds rounds, each round running them
one after another (--steps steps each), and each keeps its fastest round: ranks sharing cores
with anything else wait on one another, so the least disturbed round is the one compared. The
fastest uniform policy is the one the plan is held against, as the ratio of their steps. Per
stage, the plan's measured peak against the peak it predicted. Prints Markdown. Run it on an
idle machine.
"""
import argparse
import sys

from cli_json import last_json

UNIFORM = ["none", "selective", "sublayer:2,1", "sublayer:1,2", "every:1", "every:2", "every:3"]
MIB = 1024 * 1024


def run(args, preset, stages, chunks, policy):
    return last_json([
        args.cli, "run", "--preset", preset, "--seq-len", str(args.seq_len), "--batch",
        str(args.batch), "--accum", str(args.accum), "--steps", str(args.steps), "--threads", "1",
        "--nproc", str(stages), "--pp", str(stages), "--virtual-stages", str(chunks),
        "--checkpoint", policy, "--json"])


def fullest(result):
    return max(rank["peak_activation_bytes"] for rank in result["ranks"])


def compare(args, preset, stages, chunks):
    # Memory first: peaks repeat from the first timed step, so two steps tell what fits.
    sized = argparse.Namespace(**{**vars(args), "steps": 2})
    none = run(sized, preset, stages, chunks, "none")
    smallest = run(sized, preset, stages, chunks, "plan:1KiB")["plan"]["smallest_feasible_bytes"]
    budget = int(smallest + args.budget_at * (fullest(none) - smallest))
    plan_policy = f"plan:{budget}"
    peaks = {"plan": run(sized, preset, stages, chunks, plan_policy)}
    if not peaks["plan"]["plan"].get("chosen") or "ranks" not in peaks["plan"]:
        # The sweep's grid moves with the budget: a budget just above the smallest can miss.
        print(f"\n**{preset}, {stages}×{chunks}**: no plan fits {budget / MIB:.1f} MiB "
              f"(status {peaks['plan'].get('status')}); raise --budget-at")
        return
    for policy in UNIFORM:
        peaks[policy] = none if policy == "none" else run(sized, preset, stages, chunks, policy)
    fitting = [policy for policy in UNIFORM if fullest(peaks[policy]) <= budget]
    steps = {}
    planned = None
    for _ in range(args.rounds):
        for policy in ["plan"] + fitting:
            result = run(args, preset, stages, chunks, plan_policy if policy == "plan" else policy)
            if policy == "plan":
                planned = result
            steps[policy] = min(steps.get(policy, float("inf")), result["step_ms"])
    print(f"\n**{preset}, {stages}×{chunks}, budget {budget / MIB:.1f} MiB** (smallest a plan "
          f"fits {smallest / MIB:.1f} MiB; plan chose `{planned['plan']['chosen']}`)\n")
    print("| policy | fullest stage MiB | fits | step ms (fastest of the rounds) |")
    print("|---|---|---|---|")
    for policy, result in peaks.items():
        fits = fullest(result) <= budget
        step = f"{steps[policy]:.0f}" if policy in steps else "not timed"
        print(f"| {policy} | {fullest(result) / MIB:.1f} | {'yes' if fits else 'no'} | {step} |")
    predicted = planned["plan"]["predicted_stage_peak_bytes"]
    stage_ratios = ", ".join(
        f"{rank['peak_activation_bytes'] / predicted[rank['rank']]:.3f}"
        for rank in sorted(planned["ranks"], key=lambda r: r["rank"]))
    best = min((steps[policy], policy) for policy in fitting) if fitting else None
    summary = (f"{best[1]} {best[0]:.0f} ms: plan/uniform step {steps['plan'] / best[0]:.2f}"
               if best else "no uniform policy fits")
    print(f"\nbest uniform that fits: {summary}; the plan's stages measured/predicted peak: "
          f"{stage_ratios}")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--presets", default="small,llama-small")
    parser.add_argument("--layouts", default="2x1,4x1,2x2")
    parser.add_argument("--accum", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget-at", type=float, default=0.5)
    args = parser.parse_args()
    print(f"{args.accum} micro-batches of {args.batch} × {args.seq_len} tokens, "
          f"{args.steps} steps, {args.rounds} rounds, 1 thread a rank")
    for preset in args.presets.split(","):
        for layout in args.layouts.split(","):
            stages, chunks = (int(x) for x in layout.split("x"))
            compare(args, preset, stages, chunks)


if __name__ == "__main__":
    main()
