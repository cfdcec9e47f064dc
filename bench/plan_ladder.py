#!/usr/bin/env python3
"""The planner checked by running its plans: a ladder of budgets, predicted against measured.

    python3 bench/plan_ladder.py --cli build/app/rematlab-cli --preset small --threads 1 --rounds 3 \
        --db ladder-small.sqlite --chart docs/images/plan-frontier-small.png

One `rematlab-cli plan --ladder N --json` (one profile) gives, for N activation budgets from the
smallest any plan fits to `none`'s predicted peak, the plan chosen at each and the predictions of
the uniform policies. Every plan and every uniform policy is then trained for real (`run
--checkpoint … --json`): measured peak activation (allocator, above the step's start) and median
step time beside the prediction, and at each budget the plan's measured tokens/s beside the best
uniform policy whose measured peak fits the same budget (`selective` too, which is measured but
not predicted: it recomputes inside sublayers, which the chain costs do not split).

With --db, the profile and every run are recorded in that database (a fresh one is best: the
chart draws every run of the configuration it holds); with --chart, the window then draws the
frontier from it (`rematlab --db … --plan-chart …`, offscreen).
"""
import os
import argparse
import statistics
import subprocess

from cli_json import last_json


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rungs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--db", help="record the profile and every run in this database")
    parser.add_argument("--chart", help="PNG of the frontier, drawn by the window from --db")
    parser.add_argument("--gui", default="build/app/rematlab", help="the window, for --chart")
    parser.add_argument("--rounds", type=int, default=3,
                        help="every plan and policy trained once per round, rounds interleaved; "
                             "medians")
    args = parser.parse_args()
    if args.chart and not args.db:
        parser.error("--chart draws from --db: give both")
    shape = ["--preset", args.preset, "--batch", str(args.batch), "--threads", str(args.threads)]
    record = ["--db", args.db] if args.db else []
    ladder = last_json([args.cli, "plan", *shape, "--ladder", str(args.rungs),
                        "--repeats", str(args.repeats), *record, "--json"])
    measured_only = ["selective"]

    # Every policy once per round, so that a slow minute of the machine hits them all alike.
    policies = [entry["policy"] for entry in ladder["uniform"]] + measured_only
    policies += [rung["plan"] for rung in ladder["ladder"] if rung["plan"] not in policies]
    runs = {policy: [] for policy in policies}
    for _ in range(args.rounds):
        for policy in policies:
            run = last_json([args.cli, "run", *shape, "--steps", str(args.steps),
                             "--checkpoint", policy, *record, "--json"])
            runs[policy].append(run)

    def measure(policy):
        taken = runs[policy]
        return (taken[0]["peak_activation_bytes"],
                statistics.median(run["step_ms"] for run in taken),
                statistics.median(run["tokens_per_s"] for run in taken))

    mib = lambda b: f"{b / 2**20:.1f}"
    uniform = {}
    for entry in ladder["uniform"]:
        uniform[entry["policy"]] = (entry, measure(entry["policy"]))
    for policy in measured_only:
        uniform[policy] = (None, measure(policy))
    print(f"{args.preset}, batch {args.batch}, {args.threads} threads, fp32, {args.steps} steps "
          f"(1 warm-up), medians of {args.rounds} interleaved rounds; profile {ladder['profile_ms'] / 1e3:.1f} s, planning "
          f"{ladder['planning_ms']:.1f} ms per budget; MiB of activations above the model states")
    print()
    print("| budget | plan | predicted peak | measured peak | ratio | predicted ms | measured ms "
          "| ratio | tokens/s | best uniform that fits (measured) | its tokens/s | plan / uniform |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for rung in ladder["ladder"]:
        budget = rung["budget_bytes"]
        peak, step_ms, tokens = measure(rung["plan"])
        fitting = [(m[2], policy) for policy, (_, m) in uniform.items() if m[0] <= budget]
        best = max(fitting) if fitting else None
        print(f"| {mib(budget)} | `{rung['plan']}` | {mib(rung['predicted_peak_bytes'])} | "
              f"{mib(peak)} | {peak / rung['predicted_peak_bytes']:.3f} | "
              f"{rung['predicted_step_ms']:.0f} | {step_ms:.0f} | "
              f"{step_ms / rung['predicted_step_ms']:.3f} | {tokens:.0f} | "
              f"{best[1] if best else '(none fits)'} | {best[0] if best else 0:.0f} | "
              f"{tokens / best[0] if best else float('nan'):.2f} |", flush=True)
    print()
    print("| uniform policy | predicted peak | measured peak | ratio | predicted ms | measured ms "
          "| ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for policy, (entry, (peak, step_ms, _)) in uniform.items():
        if entry is None:
            print(f"| {policy} | — | {mib(peak)} | — | — | {step_ms:.0f} | — |")
            continue
        print(f"| {policy} | {mib(entry['predicted_peak_bytes'])} | {mib(peak)} | "
              f"{peak / entry['predicted_peak_bytes']:.3f} | {entry['predicted_step_ms']:.0f} | "
              f"{step_ms:.0f} | {step_ms / entry['predicted_step_ms']:.3f} |")
    if args.chart:
        # The window draws offscreen: no display needed.
        env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
        subprocess.run([args.gui, "--db", args.db, "--plan-chart", args.chart], check=True, env=env)


if __name__ == "__main__":
    main()
