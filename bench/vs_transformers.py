#!/usr/bin/env python3
"""RematLab against the stack most fine-tuning users run: Hugging Face transformers, with PEFT.

The peer is transformers' LlamaForCausalLM built from a LlamaConfig of the same shape (random
weights, `sdpa` attention, untied head), trained in full or with PEFT's LoRA on the same
projections, rank and alpha, without checkpointing or with transformers' own
gradient_checkpointing_enable (every decoder layer recomputed, non-reentrant), against
`rematlab-cli run` with --finetune full|lora and --checkpoint none|every:1. Same batch, sequence,
thread count, steps and warm-up, AdamW on what trains, gradients kept allocated between steps on
both sides; time is the median step, memory the peak live tensor bytes above the step's start
(CPU allocator events on both sides: RematLab's reporting hook, PyTorch's profiler).

transformers and peft are not dependencies of the project: install them, with the project's own
Python, into a folder outside the checkout, and delete the torch pip may add there:

    D=~/.cache/rematlab/peers; PY=.venv/bin/python
    $PY -m pip install --target $D transformers peft && rm -rf $D/torch $D/torch-* $D/nvidia*
    PYTHONPATH=$D $PY bench/vs_transformers.py --cli build/app/rematlab-cli
"""
import argparse
import json
import os
import subprocess
import warnings

import torch
import torch.nn.functional as F

# The same measurement as the PyTorch peer's: allocator events above the step's start.
from vs_pytorch import median_run, median_step_seconds, peer_peak_activation

# The projections a LoRA adapts, as each side names them.
TARGETS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj",
           "up": "up_proj", "down": "down_proj"}


def peer_model(args, finetune, policy):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=args.d_model, intermediate_size=args.mlp_hidden,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                         max_position_embeddings=args.seq_len, rope_theta=args.rope_theta,
                         rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False,
                         attention_dropout=0.0, use_cache=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    if policy == "every:1":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if finetune == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(
            r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0, bias="none",
            target_modules=[TARGETS[t] for t in args.lora_targets.split(",")]))
    model.train()
    return model


def peer_run(args, finetune, policy):
    model = peer_model(args, finetune, policy)
    trained = [p for p in model.parameters() if p.requires_grad]
    for p in trained:
        p.grad = torch.zeros_like(p)
    optimizer = torch.optim.AdamW(trained, lr=1e-3, weight_decay=0.01)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len))  # every position, as ours

    def step():
        logits = model(input_ids=tokens).logits
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # as RematLab: gradients stay allocated

    step_s = median_step_seconds(step, args.warmup, args.steps)
    return {"step_ms": 1e3 * step_s, "tokens_per_s": args.batch * args.seq_len / step_s,
            "peak_activation_bytes": peer_peak_activation(step),
            "trainable": sum(p.numel() for p in trained)}


def rematlab_run(args, finetune, policy):
    command = [args.cli, "run", "--arch", "llama", "--layers", str(args.layers), "--d-model",
               str(args.d_model), "--heads", str(args.heads), "--kv-heads", str(args.kv_heads),
               "--mlp-hidden", str(args.mlp_hidden), "--tie-head", "false", "--rope-theta",
               str(args.rope_theta), "--seq-len", str(args.seq_len), "--vocab", str(args.vocab),
               "--batch", str(args.batch), "--steps", str(args.warmup + args.steps),
               "--warmup-steps", str(args.warmup), "--threads", str(args.threads),
               "--checkpoint", policy, "--json"]
    if finetune == "lora":
        command += ["--finetune", "lora", "--lora-rank", str(args.lora_rank), "--lora-alpha",
                    str(args.lora_alpha), "--lora-targets", args.lora_targets]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    trainable = result.get("trainable_params", result["params"])
    return {"step_ms": result["step_ms"], "tokens_per_s": result["tokens_per_s"],
            "peak_activation_bytes": result["peak_activation_bytes"], "trainable": trainable}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--mlp-hidden", type=int, default=704)
    parser.add_argument("--rope-theta", type=float, default=10000.0)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--lora-alpha", type=float, default=32.0)
    parser.add_argument("--lora-targets", default="q,k,v,o,gate,up,down")
    args = parser.parse_args()
    if args.rounds < 1 or args.rounds % 2 == 0:
        parser.error("--rounds must be odd (a median of rounds that is one of them)")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # the profiler warns that it sees no GPU
    import peft
    import transformers

    load = lambda: "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average (1/5/15 min) at start: {load()}")
    print(f"PyTorch {torch.__version__}, transformers {transformers.__version__}, peft "
          f"{peft.__version__}; llama, {args.layers} blocks, d {args.d_model}, {args.heads} heads "
          f"({args.kv_heads} key/value), SwiGLU {args.mlp_hidden}, seq {args.seq_len}, vocab "
          f"{args.vocab}, batch {args.batch}, {args.threads} thread(s); LoRA r {args.lora_rank}, "
          f"alpha {args.lora_alpha:g} on {args.lora_targets}; median step of {args.steps} after "
          f"{args.warmup} warm-up, median of {args.rounds} rounds")
    header = ("training", "policy", "trained params ours / peer", "ours act MiB", "peer act MiB",
              "act ours/peer", "ours tok/s", "peer tok/s", "tok/s ours/peer",
              "rounds ours/peer, lowest–highest")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    pairings = [(f, p) for f in ("full", "lora") for p in ("none", "every:1")]
    runs = {(f, p, side): [] for f, p in pairings for side in ("ours", "peer")}
    # Rounds outside, so that drift in the machine's speed hits every row; within a round the two
    # sides of a pairing run back to back, first one then the other, so that each round's ratio
    # compares runs a few seconds apart and neither side always runs first.
    sides = {"ours": rematlab_run, "peer": peer_run}
    for round_index in range(args.rounds):
        order = ("ours", "peer") if round_index % 2 == 0 else ("peer", "ours")
        for finetune, policy in pairings:
            for side in order:
                runs[(finetune, policy, side)].append(sides[side](args, finetune, policy))
    mib = lambda b: b / (1 << 20)
    for finetune, policy in pairings:
        ours = median_run(runs[(finetune, policy, "ours")])
        peer = median_run(runs[(finetune, policy, "peer")])
        ratios = sorted(o["tokens_per_s"] / p["tokens_per_s"] for o, p in
                        zip(runs[(finetune, policy, "ours")], runs[(finetune, policy, "peer")]))
        print(f"| {finetune} | {policy} | {ours['trainable']:,} / {peer['trainable']:,} | "
              f"{mib(ours['peak_activation_bytes']):.1f} | {mib(peer['peak_activation_bytes']):.1f} | "
              f"{ours['peak_activation_bytes'] / peer['peak_activation_bytes']:.2f} | "
              f"{ours['tokens_per_s']:.0f} | {peer['tokens_per_s']:.0f} | "
              f"{ours['tokens_per_s'] / peer['tokens_per_s']:.2f} | "
              f"{ratios[len(ratios) // 2]:.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f}) |")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
