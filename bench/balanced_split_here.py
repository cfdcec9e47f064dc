#!/usr/bin/env python3
"""A pipeline split by the chain's measured times against the rule's split, side by side.

    python3 bench/balanced_split_here.py [--cli build/app/rematlab-cli]
                                         [--models small:16384,llama-small:16384,small:256]
                                         [--layouts 2x1,4x1,2x2] [--accum 4] [--steps 5]
                                         [--rounds 2]

Each model is a preset with the vocabulary given after its colon: with a large one the head and
loss cost several blocks, which the rule (equal blocks, the ends no larger) does not see. For
each layout PxV (P stages of V chunks, one stage a rank), the rule's split and
`--pp-split balanced` run one after the other as `rematlab-cli run --nproc P --pp P
--virtual-stages V --accum M --threads 1 --json`, in --rounds rounds, each keeping its fastest
round (ranks share the cores). The balanced runs share one runs database, so the chain is
measured once and its kept costs split every later run alike. Prints Markdown: each split, the
step times and their ratio (balanced over the rule; below 1 is faster), and the bubble share
rank 0 measured. Run it on an idle machine.
"""
import argparse
import os
import tempfile

from cli_json import last_json


def run(args, preset, vocab, stages, chunks, extra):
    return last_json([
        args.cli, "run", "--preset", preset, "--vocab", str(vocab), "--batch", str(args.batch),
        "--accum", str(args.accum), "--steps", str(args.steps), "--threads", "1",
        "--nproc", str(stages), "--pp", str(stages), "--virtual-stages", str(chunks),
        "--json"] + extra)


def rule_split(layers, chunks):
    """checkpoint/stage_blocks.h's rule, for the table (where it leaves the ends a block or more)."""
    if chunks <= 2:
        first = layers // chunks
        return [first] * (chunks - 1) + [layers - (chunks - 1) * first]
    middle = -(-layers // chunks)
    ends = layers - (chunks - 2) * middle
    return [ends // 2] + [middle] * (chunks - 2) + [ends - ends // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--models", default="small:16384,llama-small:16384,small:256")
    parser.add_argument("--layouts", default="2x1,4x1,2x2")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--accum", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        db = os.path.join(scratch, "runs.sqlite")
        print("| model | vocab | layout | rule's split | balanced split | step ms rule / balanced "
              "| ratio | bubble share rule / balanced |")
        print("|---|---|---|---|---|---|---|---|")
        for model in args.models.split(","):
            preset, vocab = model.split(":")
            for layout in args.layouts.split(","):
                stages, chunks = (int(part) for part in layout.split("x"))
                best = {}
                for _ in range(args.rounds):
                    for name, extra in (("rule", []),
                                        ("balanced", ["--pp-split", "balanced", "--db", db])):
                        result = run(args, preset, vocab, stages, chunks, extra)
                        if name not in best or result["step_ms"] < best[name]["step_ms"]:
                            best[name] = result
                rule, balanced = best["rule"], best["balanced"]
                split = ",".join(str(blocks) for blocks in balanced["pp_split"])
                rule_text = ",".join(str(b) for b in rule_split(rule["layers"], stages * chunks))
                share = [r["bubble_ms"] / r["step_ms"] for r in (rule, balanced)]
                print(f"| {preset} | {vocab} | PP {stages}" + (f" × V {chunks}" if chunks > 1 else "")
                      + f" | {rule_text} | {split} | {rule['step_ms']:.0f} / {balanced['step_ms']:.0f} "
                      f"| {balanced['step_ms'] / rule['step_ms']:.2f} "
                      f"| {share[0]:.2f} / {share[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
