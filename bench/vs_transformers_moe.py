#!/usr/bin/env python3
"""A mixture of experts in RematLab against transformers' Mixtral of the same shape.

The peer is transformers' MixtralForCausalLM built from a MixtralConfig (random weights, `sdpa`
attention, untied head, the balance loss on with the same coefficient: output_router_logits),
trained in full without checkpointing or with transformers' gradient_checkpointing_enable (every
decoder layer recomputed, non-reentrant), against `rematlab-cli run --experts E
--experts-per-token K --balance-coefficient C` with --checkpoint none|every:1. Same batch,
sequence, thread count, steps and warm-up, AdamW, gradients kept allocated between steps on both
sides; time is the median step, memory the peak live tensor bytes above the step's start (CPU
allocator events on both sides: RematLab's reporting hook, PyTorch's profiler). The loss on both
sides is the cross-entropy of every position plus coefficient × the balance loss.

transformers is not a dependency of the project: install it, with the project's own Python, into
a folder outside the checkout (see bench/vs_transformers.py), then

    PYTHONPATH=~/.cache/rematlab/peers .venv/bin/python bench/vs_transformers_moe.py
"""
import argparse
import json
import os
import subprocess
import warnings

import torch
import torch.nn.functional as F

from vs_pytorch import median_run, median_step_seconds, peer_peak_activation


def peer_model(args, policy):
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(hidden_size=args.d_model, intermediate_size=args.expert_hidden,
                           num_hidden_layers=args.layers, num_attention_heads=args.heads,
                           num_key_value_heads=args.kv_heads, num_local_experts=args.experts,
                           num_experts_per_tok=args.experts_per_token, vocab_size=args.vocab,
                           max_position_embeddings=args.seq_len, rope_theta=10000.0,
                           rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
                           attention_dropout=0.0, router_jitter_noise=0.0,
                           output_router_logits=True, router_aux_loss_coef=args.balance,
                           use_cache=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = MixtralForCausalLM(config)
    if policy == "every:1":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def peer_run(args, policy):
    model = peer_model(args, policy)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len))
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len))

    def step():
        out = model(input_ids=tokens, output_router_logits=True)
        loss = F.cross_entropy(out.logits.reshape(-1, args.vocab), targets.reshape(-1))
        (loss + args.balance * out.aux_loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # as RematLab: gradients stay allocated

    step_s = median_step_seconds(step, args.warmup, args.steps)
    return {"step_ms": 1e3 * step_s, "tokens_per_s": args.batch * args.seq_len / step_s,
            "peak_activation_bytes": peer_peak_activation(step),
            "params": sum(p.numel() for p in params)}


def rematlab_run(args, policy):
    command = [args.cli, "run", "--arch", "llama", "--layers", str(args.layers), "--d-model",
               str(args.d_model), "--heads", str(args.heads), "--kv-heads", str(args.kv_heads),
               "--mlp-hidden", str(args.expert_hidden), "--experts", str(args.experts),
               "--experts-per-token", str(args.experts_per_token), "--balance-coefficient",
               str(args.balance), "--tie-head", "false", "--seq-len", str(args.seq_len),
               "--vocab", str(args.vocab), "--batch", str(args.batch), "--steps",
               str(args.warmup + args.steps), "--warmup-steps", str(args.warmup), "--threads",
               str(args.threads), "--checkpoint", policy, "--json"]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return {"step_ms": result["step_ms"], "tokens_per_s": result["tokens_per_s"],
            "peak_activation_bytes": result["peak_activation_bytes"], "params": result["params"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--experts-per-token", type=int, default=2)
    parser.add_argument("--expert-hidden", type=int, default=512)
    parser.add_argument("--balance", type=float, default=0.02)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 1 or args.rounds % 2 == 0:
        parser.error("--rounds must be odd (a median of rounds that is one of them)")
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # the profiler warns that it sees no GPU
    import transformers

    load = lambda: "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average (1/5/15 min) at start: {load()}")
    print(f"PyTorch {torch.__version__}, transformers {transformers.__version__}; "
          f"{args.layers} blocks, d {args.d_model}, {args.heads} heads ({args.kv_heads} key/value), "
          f"{args.experts} experts of SwiGLU {args.expert_hidden}, {args.experts_per_token} a "
          f"token, balance coefficient {args.balance:g}, seq {args.seq_len}, vocab {args.vocab}, "
          f"batch {args.batch}, {args.threads} thread(s); median step of {args.steps} after "
          f"{args.warmup} warm-up, median of {args.rounds} rounds")
    header = ("policy", "params ours / peer", "ours act MiB", "peer act MiB", "act ours/peer",
              "ours tok/s", "peer tok/s", "tok/s ours/peer", "rounds ours/peer, lowest–highest")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    policies = ("none", "every:1")
    runs = {(p, side): [] for p in policies for side in ("ours", "peer")}
    sides = {"ours": rematlab_run, "peer": peer_run}
    # Rounds outside, so that drift in the machine's speed hits every row; within a round the two
    # sides run back to back, neither always first.
    for round_index in range(args.rounds):
        order = ("ours", "peer") if round_index % 2 == 0 else ("peer", "ours")
        for policy in policies:
            for side in order:
                runs[(policy, side)].append(sides[side](args, policy))
    mib = lambda b: b / (1 << 20)
    for policy in policies:
        ours = median_run(runs[(policy, "ours")])
        peer = median_run(runs[(policy, "peer")])
        ratios = sorted(o["tokens_per_s"] / p["tokens_per_s"]
                        for o, p in zip(runs[(policy, "ours")], runs[(policy, "peer")]))
        print(f"| {policy} | {ours['params']:,} / {peer['params']:,} | "
              f"{mib(ours['peak_activation_bytes']):.1f} | {mib(peer['peak_activation_bytes']):.1f} | "
              f"{ours['peak_activation_bytes'] / peer['peak_activation_bytes']:.2f} | "
              f"{ours['tokens_per_s']:.0f} | {peer['tokens_per_s']:.0f} | "
              f"{ours['tokens_per_s'] / peer['tokens_per_s']:.2f} | "
              f"{ratios[len(ratios) // 2]:.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f}) |")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
