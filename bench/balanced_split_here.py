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
rank 0 measured. The layout planner's splits run too: the rule's as `rematlab-cli layout` gives
it, and `layout --pp-split balanced`'s (the same balancing over its predicted costs), run as a
list. Run it on an idle machine.
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


def planned_split(args, preset, vocab, stages, chunks, balanced):
    """The blocks of each chunk the layout planner places for this run (its rule, or balanced)."""
    answer = last_json([
        args.cli, "layout", "--preset", preset, "--vocab", str(vocab), "--gpu", "rtx4090",
        "--gpus", str(stages), "--gpus-per-node", str(stages), "--pp", str(stages),
        "--virtual-stages", str(chunks), "--micro-batch", str(args.batch), "--global-batch",
        str(args.batch * args.accum), "--precision", "fp32", "--checkpoint", "none",
        "--offload", "none", "--json"] + (["--pp-split", "balanced"] if balanced else []))
    return ",".join(str(blocks) for blocks in answer["layouts"][0]["split"])


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
        print("| model | vocab | layout | rule's split | balanced split | planner's balanced split "
              "| step ms rule / balanced / planner's | ratio balanced, planner's | bubble share rule "
              "/ balanced / planner's |")
        print("|---|---|---|---|---|---|---|---|---|")
        for model in args.models.split(","):
            preset, vocab = model.split(":")
            for layout in args.layouts.split(","):
                stages, chunks = (int(part) for part in layout.split("x"))
                rule_text = planned_split(args, preset, vocab, stages, chunks, False)
                planned = planned_split(args, preset, vocab, stages, chunks, True)
                best = {}
                for _ in range(args.rounds):
                    for name, extra in (("rule", []),
                                        ("balanced", ["--pp-split", "balanced", "--db", db]),
                                        ("planned", ["--pp-split", planned])):
                        result = run(args, preset, vocab, stages, chunks, extra)
                        if name not in best or result["step_ms"] < best[name]["step_ms"]:
                            best[name] = result
                rule = best["rule"]
                split = ",".join(str(blocks) for blocks in best["balanced"]["pp_split"])
                steps = [best[name]["step_ms"] for name in ("rule", "balanced", "planned")]
                share = [best[name]["bubble_ms"] / best[name]["step_ms"]
                         for name in ("rule", "balanced", "planned")]
                print(f"| {preset} | {vocab} | PP {stages}" + (f" × V {chunks}" if chunks > 1 else "")
                      + f" | {rule_text} | {split} | {planned} | "
                      + " / ".join(f"{step:.0f}" for step in steps)
                      + f" | {steps[1] / steps[0]:.2f}, {steps[2] / steps[0]:.2f} | "
                      + " / ".join(f"{part:.2f}" for part in share) + " |", flush=True)


if __name__ == "__main__":
    main()
