#!/usr/bin/env python3
"""What recording every step in the runs database costs training: the same run with and
without --db, interleaved round by round, compared by median step time and by wall time.

    python3 bench/store_overhead.py --cli build/app/rematlab-cli --steps 3000 --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time


def run(args, db):
    command = [args.cli, "run", "--preset", args.preset, "--steps", str(args.steps),
               "--threads", str(args.threads), "--json"]
    if db:
        command += ["--db", db]
    start = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    return json.loads(out.strip().splitlines()[-1]), wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    step_ms = {False: [], True: []}
    wall = {False: [], True: []}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            # Alternate which goes first, so drift in machine speed does not favour one side.
            order = (False, True) if round_index % 2 == 0 else (True, False)
            for recorded in order:
                db = os.path.join(scratch, f"runs-{round_index}.sqlite") if recorded else None
                summary, seconds = run(args, db)
                step_ms[recorded].append(summary["step_ms"])
                wall[recorded].append(seconds)
    base_step, db_step = statistics.median(step_ms[False]), statistics.median(step_ms[True])
    base_wall, db_wall = statistics.median(wall[False]), statistics.median(wall[True])
    print(f"{args.preset}, {args.steps} steps, {args.threads} thread(s), median of {args.rounds} rounds")
    print("| variant | median step ms | wall s | spread of step ms across rounds |")
    print("|---|---|---|---|")
    for recorded, name in ((False, "no database"), (True, "--db (every step recorded)")):
        spread = f"{min(step_ms[recorded]):.3f}–{max(step_ms[recorded]):.3f}"
        print(f"| {name} | {statistics.median(step_ms[recorded]):.3f} | "
              f"{statistics.median(wall[recorded]):.1f} | {spread} |")
    print(f"\nratio with/without: step time {db_step / base_step:.4f}, wall time {db_wall / base_wall:.4f}")


if __name__ == "__main__":
    main()
