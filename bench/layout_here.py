#!/usr/bin/env python3
"""The layout planner against layouts RematLab runs on this machine, with this machine as the GPU.

    python3 bench/layout_here.py [--cli build/app/rematlab-cli] [--presets small,llama-small]

This machine is described to `layout` by what it measures: `rematlab-cli peak --threads 1` for
the FLOP/s one rank reaches (shared when there are more ranks than cores), a Gloo all-reduce
between local processes for the link's bandwidth (the project's PyTorch runs it), as matmul
efficiency the share of that peak the same model and policy reach in one process (its hardware
FLOP/s: norms, softmax, the update and the CPU's small matmuls all count against it), no
fragmentation allowance. Each layout — data
parallel with and without sharding, tensor parallel with and without sequence parallelism, both
together — is run with `rematlab-cli run --nproc N … --steps 4 --threads 1 --json` and evaluated
with the same degrees fixed. The table gives, for rank 0, the activation peak and the model
states measured and predicted, and the step time measured (the median of the timed steps)
and predicted. Prints Markdown. Run it on an idle machine: timings share its cores.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from cli_json import last_json

GLOO_PROBE = r"""
import datetime, os, sys, time, torch, torch.distributed as dist
rank, world, port, mib = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))  # a rank lost ends the probe
x = torch.ones(int(mib * 1024 * 1024 / 4))
for _ in range(2): dist.all_reduce(x)
start = time.perf_counter()
for _ in range(5): dist.all_reduce(x)
seconds = (time.perf_counter() - start) / 5
if rank == 0: print(x.numel() * 4 * 2 * (world - 1) / world / seconds)
dist.destroy_process_group()
"""

LAYOUTS = [  # label, ranks, tp, sequence parallel, zero (the engine's --shard)
    ("DP 2", 2, 1, False, 0),
    ("DP 2 ZeRO 1", 2, 1, False, 1),
    ("DP 2 ZeRO 3", 2, 1, False, 3),
    ("TP 2", 2, 2, False, 0),
    ("TP 2 + SP", 2, 2, True, 0),
    ("TP 2 + SP × DP 2 ZeRO 1", 4, 2, True, 1),
]
SHARD = ["none", "optimizer", "gradients", "parameters"]


def gloo_bandwidth(python, world, mib=32):
    """Bus bandwidth (bytes/s each way) of a ring all-reduce of `mib` MiB between `world` local
    processes."""
    with tempfile.TemporaryDirectory() as scratch:  # gone however the probe ends
        probe = os.path.join(scratch, "probe.py")
        with open(probe, "w") as f:
            f.write(GLOO_PROBE)
        port = str(29500 + os.getpid() % 1000)
        procs = [subprocess.Popen([python, probe, str(r), str(world), port, str(mib)],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for r in range(world)]
        out = [p.communicate(timeout=300)[0] for p in procs]
    return float(out[0].strip())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--python", default=".venv/bin/python")
    parser.add_argument("--presets", default="small,llama-small")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--policies", default="none,every:1")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as scratch:  # measured now, kept nowhere
        peak = last_json([args.cli, "peak", "--threads", "1", "--json", "--db",
                          os.path.join(scratch, "runs.sqlite")])["peak_flops"]
    bandwidth = {n: gloo_bandwidth(args.python, n) for n in (2, 4)}
    # What a tensor-parallel block sends is far smaller than 32 MiB: the link at those sizes.
    small = {mib: gloo_bandwidth(args.python, 2, mib) for mib in (0.75, 1.5, 3)}
    print(f"one rank's peak {peak / 1e9:.1f} GFLOP/s (fp32, 1 thread), {cores} cores; Gloo bus "
          f"bandwidth {bandwidth[2] / 1e9:.2f} GB/s at 2 ranks, {bandwidth[4] / 1e9:.2f} at 4 "
          f"(32 MiB); at 2 ranks " +
          ", ".join(f"{small[mib] / 1e9:.2f} at {mib} MiB" for mib in small) + "\n")
    # The share of the matmul peak this model's whole step reaches in one process (its hardware
    # FLOPs per second over the peak): what `layout` calls the matmul efficiency, measured here.
    efficiencies = {}
    for preset in args.presets.split(","):
        for policy in args.policies.split(","):
            one = last_json([args.cli, "run", "--preset", preset, "--seq-len", str(args.seq_len),
                             "--batch", str(args.batch), "--checkpoint", policy, "--steps", "4",
                             "--threads", "1", "--peak-flops", str(peak), "--json"])
            efficiencies[(preset, policy)] = one["hfu"]
            print(f"{preset} {policy}: one process reaches {100 * one['hfu']:.1f} % of the peak")
    print()
    print("| model | layout | policy | activations meas. / pred. MiB | ratio | states meas. / pred. MiB "
          "| step meas. / pred. ms | ratio | waiting on collectives meas. / pred. ms | the rest meas. / pred. ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for preset in args.presets.split(","):
        for label, ranks, tp, sp, zero in LAYOUTS:
            dp = ranks // tp
            for policy in args.policies.split(","):
                run = [args.cli, "run", "--preset", preset, "--seq-len", str(args.seq_len),
                       "--nproc", str(ranks), "--tp", str(tp), "--batch", str(args.batch),
                       "--checkpoint", policy, "--steps", "4", "--threads", "1", "--json"]
                if sp:
                    run.append("--sequence-parallel")
                if dp > 1:
                    run += ["--shard", SHARD[zero]]
                measured = last_json(run)
                rank = measured["ranks"][0]
                share = min(1.0, cores / ranks)  # ranks beyond the cores share them
                efficiency = efficiencies[(preset, policy)]
                plan = last_json([
                    args.cli, "layout", "--model", preset, "--seq-len", str(args.seq_len),
                    "--gpu-memory", "16GiB", "--peak-flops", str(peak * share),
                    "--efficiency", str(efficiency),
                    "--intra-node-bandwidth", str(bandwidth[ranks]),
                    "--inter-node-bandwidth", str(bandwidth[ranks]), "--gpus", str(ranks),
                    "--gpus-per-node", str(ranks), "--global-batch", str(args.batch * dp),
                    "--precision", "fp32", "--fragmentation", "0", "--tp", str(tp), "--pp", "1",
                    "--cp", "1", "--dp", str(dp), "--zero", str(zero), "--micro-batch",
                    str(args.batch), "--checkpoint", policy, "--offload", "none",
                    "--sequence-parallel" if sp else "--no-sequence-parallel", "--json"])
                best = plan["layouts"][0]
                memory = best["memory_bytes"]
                states = memory["weights"] + memory["gradients"] + memory["master"] + memory["optimizer"]
                act_ratio = rank["peak_activation_bytes"] / memory["activations"]
                step_ratio = measured["step_ms"] / (1000 * best["step_s"])
                # The step split in two: the training thread blocked on collectives (the run's
                # median comm_wait_ms; the planner's exposed tensor, context and data parts)
                # and everything else.
                parts = best["time_s"]
                wait_pred = 1000 * (parts["tensor"] + parts["context"] + parts["data"])
                wait = rank["comm_wait_ms"]
                mib = 1024 * 1024
                print(f'| {preset} | {label} | {policy} | {rank["peak_activation_bytes"] / mib:.1f} / '
                      f'{memory["activations"] / mib:.1f} | {act_ratio:.3f} | '
                      f'{rank["model_state_bytes"] / mib:.1f} / {states / mib:.1f} | '
                      f'{measured["step_ms"]:.0f} / {1000 * best["step_s"]:.0f} | {step_ratio:.2f} | '
                      f'{wait:.0f} / {wait_pred:.0f} | '
                      f'{measured["step_ms"] - wait:.0f} / {1000 * best["step_s"] - wait_pred:.0f} |')
                sys.stdout.flush()


if __name__ == "__main__":
    main()
