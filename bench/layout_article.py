#!/usr/bin/env python3
"""What the layout planner says about the article's table: GPT-3 175B on one node of 8 × A100
40GB at the batch of each of its three strategies, and the smallest A100-40GB cluster (whole
nodes of 8) each strategy would need.

    python3 bench/layout_article.py [--cli build/app/rematlab-cli]

The article's strategies as the planner weighs them: "Baseline" keeps every activation
(--checkpoint none --offload none), "Checkpoint" recomputes (every stage chooses among
selective and every:K, --offload none), "Checkpoint+Offload" recomputes with the recomputed
segments' inputs in host memory (--offload activations). Model states stay on the GPUs in all
three, as the article's rows say nothing of moving them. Prints Markdown.
"""
import argparse

from cli_json import last_json

ARTICLE = [  # strategy, batch, the article's claimed memory per GPU and tokens/s
    ("Baseline", 8, "39.2 GB", 1200, ["--checkpoint", "none", "--offload", "none"]),
    ("Checkpoint", 32, "18.7 GB", 950, ["--offload", "none"]),
    ("Checkpoint+Offload", 64, "9.8 GB", 650, ["--offload", "activations"]),
]


def layout(cli, gpus, batch, flags):
    return last_json([cli, "layout", "--model", "gpt3-175b", "--gpu", "a100-40gb", "--gpus",
                      str(gpus), "--seq-len", "2048", "--global-batch", str(batch), "--top", "1",
                      *flags, "--json"])


def name(best):
    return (f'TP{best["tp"]}{"+SP" if best["sp"] else ""} PP{best["pp"]}×{best["vp"]} '
            f'DP{best["dp"]} ZeRO {best["zero"]} b{best["micro_batch"]} '
            f'{best["checkpoint"].split("|")[0]}')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    args = parser.parse_args()
    print("| strategy | batch | article: memory, tokens/s | on 8 × A100 40GB | smallest cluster that fits | its layout | tokens/s there |")
    print("|---|---|---|---|---|---|---|")
    for strategy, batch, memory, tokens, flags in ARTICLE:
        eight = layout(args.cli, 8, batch, flags)
        verdict = "fits" if eight["layouts"][0]["fits"] else "no: " + eight["layouts"][0]["reason"]
        found = None
        for gpus in range(8, 2049, 8):
            answer = layout(args.cli, gpus, batch, flags)
            if answer["layouts"] and answer["layouts"][0]["fits"]:
                found = (gpus, answer["layouts"][0])
                break
        where = "none up to 2048 GPUs" if not found else f"{found[0]} GPUs"
        how = "" if not found else name(found[1])
        speed = "" if not found else f'{found[1]["tokens_per_s"]:.0f}'
        print(f"| {strategy} | {batch} | {memory}, {tokens} | {verdict} | {where} | {how} | {speed} |")


if __name__ == "__main__":
    main()
