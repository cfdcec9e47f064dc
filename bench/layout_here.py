#!/usr/bin/env python3
"""The layout planner against layouts RematLab runs on this machine, with this machine as the GPU.

    python3 bench/layout_here.py [--cli build/app/rematlab-cli] [--presets small,llama-small]
    python3 bench/layout_here.py --moe       # a mixture of experts over data and expert ranks
    python3 bench/layout_here.py --accum 4   # data parallelism while micro-batches accumulate

This machine is described to `layout` by what it measures: `rematlab-cli peak --threads 1` for
the FLOP/s one rank reaches (shared when there are more ranks than cores); Gloo all-reduces
between local processes (the project's PyTorch runs them) at two sizes and two rank counts for
the link's bandwidth and latencies; the model's own matmuls and fused attention timed alone at
its shapes, forward and backward, one thread (MATMUL_PROBE), which splits one process's step
(`run`, no ranks) in two: the matmuls, and the rest, which `layout` times as element-wise work
and the update by memory bandwidth — the bandwidth is what makes its prediction of the rest equal
the rest measured under `none`, and the matmul efficiency per policy what then makes its
prediction of the whole one-process step equal the step measured; no collective hidden behind
the compute (the same cores run Gloo); no fragmentation allowance; `--runnable-here`, so that
the engine's own copies around its tensor-parallel collectives are counted. Each layout — data parallel
with and without sharding, tensor parallel with and without sequence parallelism, both together
— is run with `rematlab-cli run --nproc N … --steps 4 --threads 1 --json` and evaluated with the
same degrees fixed. With --moe the model is a mixture of experts (moe-tiny widened: 4 blocks of
d 256, 8 experts of 512) over data ranks with and without expert parallelism (`--ep`). The table
gives the per-rank peak (the highest rank's), the part of it above
the model states and the states, measured and predicted, and the step time measured (the median
of the timed steps) and predicted, split into the time waiting on collectives and the rest, and
of that wait the experts' all-to-all (the run's `dispatch_ms`, the planner's `experts` part);
under expert parallelism also the peak predicted at the loads the run recorded, each the largest
over its steps (`layout --expert-rank-load --expert-block-load --expert-load`).
Prints Markdown. Run it on an idle machine: timings share its cores.
"""
import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile

from cli_json import last_json

GLOO_PROBE = r"""
import datetime, statistics, sys, time, torch, torch.distributed as dist
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))  # a rank lost ends the probe
for mib in sys.argv[4:]:  # the median of 15 all-reduces of each size
    x = torch.ones(int(float(mib) * 1024 * 1024 / 4))
    for _ in range(3): dist.all_reduce(x)
    times = []
    for _ in range(15):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - start)
    if rank == 0: print(mib, statistics.median(times))
dist.destroy_process_group()
"""

MATMUL_PROBE = r"""
import statistics, sys, time, torch, torch.nn.functional as F
torch.set_num_threads(1)
(h, heads, kv_heads, hd, f, vocab, layers, batch, seq, gated, experts, k,
 shared) = map(int, sys.argv[1:])
tokens = batch * seq
def timed(step, repeats=7):  # the median of `repeats` after two to warm up
    for _ in range(2): step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); step(); times.append(time.perf_counter() - start)
    return statistics.median(times)
def linear(n_in, n_out, rows=tokens):  # forward, and backward's input and weight gradients
    x, w, dy = torch.randn(rows, n_in), torch.randn(n_out, n_in), torch.randn(rows, n_out)
    return timed(lambda: (x @ w.t(), dy @ w, dy.t() @ x))
def swiglu(width, rows=tokens):  # gate and up, then down
    return 2 * linear(h, width, rows) + linear(width, h, rows)
q = torch.randn(batch, heads, seq, hd, requires_grad=True)  # the engine repeats shared k, v
k_, v = torch.randn_like(q, requires_grad=True), torch.randn_like(q, requires_grad=True)
def attention():  # gradients returned, not accumulated (no element-wise sums in the timing)
    out = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
    torch.autograd.grad(out, (q, k_, v), torch.ones_like(out))
projections = linear(h, (heads + 2 * kv_heads) * hd) + linear(heads * hd, h)
if experts:  # the router, each token's k experts (balanced: rows k·tokens/E an expert), a shared one
    mlp = linear(h, experts) + experts * swiglu(f, tokens * k // experts)
    if shared: mlp += swiglu(shared) + linear(h, 1)
elif gated:
    mlp = swiglu(f)
else:
    mlp = linear(h, f) + linear(f, h)
print(layers * (projections + mlp + timed(attention)) + linear(h, vocab))
"""

LAYOUTS = [  # label, ranks, tp, sequence parallel, zero (the engine's --shard), expert ranks
    ("DP 2", 2, 1, False, 0, 1),
    ("DP 2 ZeRO 1", 2, 1, False, 1, 1),
    ("DP 2 ZeRO 2", 2, 1, False, 2, 1),
    ("DP 2 ZeRO 3", 2, 1, False, 3, 1),
    ("TP 2", 2, 2, False, 0, 1),
    ("TP 2 + SP", 2, 2, True, 0, 1),
    ("TP 2 + SP × DP 2 ZeRO 1", 4, 2, True, 1, 1),
]
EXPERT_LAYOUTS = [  # the engine trains experts over data ranks only, unsharded beside --ep
    ("DP 2", 2, 1, False, 0, 1),
    ("DP 2 EP 2", 2, 1, False, 0, 2),
    ("DP 4 EP 2", 4, 1, False, 0, 2),
    ("DP 4 EP 4", 4, 1, False, 0, 4),
]
# moe-tiny widened so that its matmuls, not the overheads, take the step.
EXPERT_SHAPE = ["--layers", "4", "--d-model", "256", "--heads", "8", "--kv-heads", "4",
                "--vocab", "256", "--experts", "8", "--expert-hidden", "512"]
SHARD = ["none", "optimizer", "gradients", "parameters"]


def gloo_all_reduce_seconds(python, world, sizes):
    """{MiB: seconds} one ring all-reduce of each size takes between `world` local processes."""
    with tempfile.TemporaryDirectory() as scratch:  # gone however the probe ends
        probe = os.path.join(scratch, "probe.py")
        with open(probe, "w") as f:
            f.write(GLOO_PROBE)
        port = str(29500 + os.getpid() % 1000)
        procs = [subprocess.Popen([python, probe, str(r), str(world), port] + [str(m) for m in sizes],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for r in range(world)]
        out = [p.communicate(timeout=300)[0] for p in procs]
    return {float(mib): float(t) for mib, t in (line.split() for line in out[0].splitlines())}


def gloo_link(python):
    """The local Gloo link as `layout` models a ring: each all-reduce costs a fixed latency plus
    one per ring step (2(n - 1) of them), and 2(n - 1)/n of its bytes over the bandwidth. A line
    fitted to all-reduces of 0.5 to 32 MiB at 2 and 4 ranks, by least squares on the relative
    error (so that the 32 MiB point does not decide the small ones' latency): its slope gives the
    bandwidth (per rank count, as ranks share the cores), its intercepts at 2 and 4 ranks the two
    latencies."""
    sizes = (0.5, 1, 2, 4, 32)
    bandwidth, intercept = {}, {}
    for n in (2, 4):
        seconds = gloo_all_reduce_seconds(python, n, sizes)
        xs = [mib * 1024 * 1024 for mib in seconds]
        ys = list(seconds.values())
        ws = [1 / (y * y) for y in ys]
        total = sum(ws)
        mean_x = sum(w * x for w, x in zip(ws, xs)) / total
        mean_y = sum(w * y for w, y in zip(ws, ys)) / total
        slope = (sum(w * (x - mean_x) * (y - mean_y) for w, x, y in zip(ws, xs, ys))
                 / sum(w * (x - mean_x) ** 2 for w, x in zip(ws, xs)))
        if slope <= 0:
            sys.exit(f"the Gloo probe at {n} ranks did not take longer for more bytes "
                     f"({seconds}): the machine is too busy to measure its link")
        bandwidth[n] = 2 * (n - 1) / n / slope
        intercept[n] = max(0.0, mean_y - slope * mean_x)
    step = max(0.0, (intercept[4] - intercept[2]) / 4)  # 6 steps at 4 ranks, 2 at 2
    fixed = max(0.0, intercept[2] - 2 * step)
    return bandwidth, fixed, step


def matmul_seconds(python, cli, model, seq_len, batch):
    """The model's matmuls and fused attention, forward and backward, timed alone (MATMUL_PROBE)
    at its shape as `estimate` gives it (a mixture's experts each at its even share of rows)."""
    shape = last_json([cli, "estimate"] + model + ["--seq-len", str(seq_len), "--json"])
    with tempfile.TemporaryDirectory() as scratch:
        probe = os.path.join(scratch, "matmuls.py")
        with open(probe, "w") as f:
            f.write(MATMUL_PROBE)
        experts = shape.get("experts", 0)
        width = shape["expert_hidden"] or shape["mlp_hidden"] if experts else shape["mlp_hidden"]
        out = subprocess.run([python, probe] + [str(int(v)) for v in (
            shape["d_model"], shape["heads"], shape["kv_heads"] or shape["heads"],
            shape["head_dim"], width, shape["vocab"], shape["layers"], batch, seq_len,
            shape["gated_mlp"], experts, shape.get("experts_per_token", 0),
            shape.get("shared_expert_hidden", 0))],
            check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def one_process_parts(cli, model, policy, seq_len, batch, peak):
    """The planner's one-process step in two: its matmul seconds at efficiency 1, and the bytes of
    its element-wise work (a recomputation's included) and its update. Two evaluations: at 1e9
    bytes/s, where the bytes take their count's seconds in 1e9, and at 1e18, where they take none
    (the recomputation's part is matmuls and element-wise work together)."""
    def parts(bandwidth):
        return last_json([cli, "layout"] + model + [
            "--seq-len", str(seq_len), "--gpu-memory", "16GiB", "--peak-flops", str(peak),
            "--efficiency", "1", "--memory-bandwidth", bandwidth, "--gpus", "1",
            "--gpus-per-node", "1", "--global-batch", str(batch), "--precision", "fp32",
            "--fragmentation", "0", "--tp", "1", "--pp", "1", "--cp", "1", "--dp", "1",
            "--micro-batch", str(batch), "--checkpoint", policy, "--offload", "none",
            "--no-overlap", "--runnable-here", "--json"])["layouts"][0]["time_s"]
    slow, instant = parts("1e9"), parts("1e18")
    at_peak = instant["compute"] + instant["recompute"]
    streamed = (slow["compute"] + slow["recompute"] + slow["elementwise"] + slow["optimizer"]
                - at_peak)
    return at_peak, 1e9 * streamed


def most_loads(db, run_id):
    """The fullest rank's load, its busiest block's and the busiest expert's, each the largest
    over the run's steps (1 where none was recorded: 'nan' without --ep)."""
    with sqlite3.connect(db) as connection:
        row = connection.execute(
            "SELECT " + ", ".join(f"max(CASE WHEN typeof({c}) = 'real' THEN {c} END)" for c in
                                  ("expert_rank_load", "expert_block_load", "expert_load")) +
            " FROM steps WHERE run_id = ?", (run_id,)).fetchone()
    return [load if load is not None else 1.0 for load in row]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default="build/app/rematlab-cli")
    parser.add_argument("--python", default=".venv/bin/python")
    parser.add_argument("--presets", default="small,llama-small")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--policies", default="none,every:1")
    parser.add_argument("--accum", type=int, default=1,
                        help="micro-batches a step; above 1 only the data-parallel layouts (what "
                        "sharding holds while micro-batches accumulate)")
    parser.add_argument("--bucket-size", default="25MiB",
                        help="the data ranks' gradient buckets, in run and layout alike (default: "
                        "the engine's)")
    parser.add_argument("--moe", action="store_true",
                        help="a mixture of experts over data and expert ranks instead")
    args = parser.parse_args()
    if args.accum < 1:  # before anything is measured
        print(f"layout_here.py: --accum: must be at least 1, got {args.accum}", file=sys.stderr)
        raise SystemExit(2)
    if args.accum > 1 and args.moe:
        print("layout_here.py: --accum: the expert layouts run one micro-batch a step; leave out "
              "--moe or --accum", file=sys.stderr)
        raise SystemExit(2)
    # Each model as `run` and `layout` both take it (--preset and its refinements).
    if args.moe:
        models = {"moe-tiny (d 256, 8 experts of 512)": ["--preset", "moe-tiny"] + EXPERT_SHAPE}
        layouts = EXPERT_LAYOUTS
    else:
        models = {preset: ["--preset", preset] for preset in args.presets.split(",")}
        layouts = LAYOUTS
    if args.accum > 1:
        layouts = [layout for layout in layouts if layout[2] == 1 and layout[5] == 1]
    cores = len(os.sched_getaffinity(0))  # the cores this process may run on
    with tempfile.TemporaryDirectory() as scratch:  # measured now, kept nowhere
        peak = last_json([args.cli, "peak", "--threads", "1", "--json", "--db",
                          os.path.join(scratch, "runs.sqlite")])["peak_flops"]
    bandwidth, fixed_latency, step_latency = gloo_link(args.python)
    print(f"one rank's peak {peak / 1e9:.1f} GFLOP/s (fp32, 1 thread), {cores} cores; Gloo "
          f"all-reduce fitted at 0.5-32 MiB: bandwidth {bandwidth[2] / 1e9:.2f} GB/s at 2 ranks, "
          f"{bandwidth[4] / 1e9:.2f} at 4; latency {1e3 * fixed_latency:.2f} ms a collective and "
          f"{1e3 * step_latency:.2f} ms a ring step\n")
    # One process split by the matmul probe: the rest under `none` gives the memory bandwidth
    # `layout` times element-wise work and the update by; then, per policy, the matmul efficiency
    # that makes the one-process step come out as measured.
    efficiencies, bandwidths = {}, {}
    for preset, model in models.items():
        matmuls = matmul_seconds(args.python, args.cli, model, args.seq_len, args.batch)
        for policy in ["none"] + [p for p in args.policies.split(",") if p != "none"]:
            one = last_json([args.cli, "run"] + model + ["--seq-len", str(args.seq_len),
                             "--batch", str(args.batch), "--checkpoint", policy, "--steps", "4",
                             "--threads", "1", "--peak-flops", str(peak), "--json"])
            step = one["step_ms"] / 1000
            at_peak, streamed = one_process_parts(args.cli, model, policy, args.seq_len,
                                                  args.batch, peak)
            if policy == "none":
                if step <= matmuls:
                    sys.exit(f"{preset}: its matmuls alone ({1e3 * matmuls:.0f} ms) took longer "
                             f"than its step ({1e3 * step:.0f} ms): the machine is too busy")
                bandwidths[preset] = streamed / (step - matmuls)
                print(f"{preset}: matmuls and attention {1e3 * matmuls:.0f} ms of a "
                      f"{1e3 * step:.0f} ms step in one process; the rest streams at "
                      f"{bandwidths[preset] / 1e9:.2f} GB/s")
            rest = step - streamed / bandwidths[preset]
            # Above the peak where the planner counts more recomputation than the engine runs
            # (a mixture's routing is not run again): taken at the peak, and said.
            fitted = at_peak / rest if rest > 0 else float("inf")
            efficiencies[(preset, policy)] = min(1.0, fitted)
            print(f"{preset} {policy}: its matmuls reach {100 * fitted:.1f} % of the peak" +
                  ("; taken as 100 %: the planner predicts this step above the measured"
                   if fitted > 1 else ""))
    print()
    # The experts' columns only for the mixture's table.
    print("| model | layout | policy | peak per rank meas. / pred. MiB | ratio | of which above the states "
          "meas. / pred. MiB | states meas. / pred. MiB | step meas. / pred. ms | ratio "
          "| waiting on collectives meas. / pred. ms | " +
          ("of which all-to-all meas. / pred. ms | " if args.moe else "") + "the rest meas. / pred. ms |" +
          (" rank / block / expert load | peak pred. at them MiB | ratio |" if args.moe else ""))
    print("|---" * (15 if args.moe else 11) + "|")
    # The runs' database: measured now, kept nowhere, gone however the table ends.
    with tempfile.TemporaryDirectory() as scratch:
        db = os.path.join(scratch, "runs.sqlite")
        for preset, model in models.items():
            for label, ranks, tp, sp, zero, ep in layouts:
                dp = ranks // tp
                experts = ["--ep", str(ep)]  # fixed: the planner would choose it too
                for policy in args.policies.split(","):
                    run = [args.cli, "run"] + model + experts + ["--seq-len", str(args.seq_len),
                           "--nproc", str(ranks), "--tp", str(tp), "--batch", str(args.batch),
                           "--checkpoint", policy, "--steps", "4", "--threads", "1", "--db", db,
                           "--accum", str(args.accum), "--json"]
                    if sp:
                        run.append("--sequence-parallel")
                    if dp > 1:
                        run += ["--shard", SHARD[zero], "--bucket-size", args.bucket_size]
                    measured = last_json(run)
                    share = min(1.0, cores / ranks)  # ranks beyond the cores share them
                    efficiency = efficiencies[(preset, policy)]
                    planned = [args.cli, "layout"] + model + experts + [
                        "--seq-len", str(args.seq_len),
                        "--gpu-memory", "16GiB", "--peak-flops", str(peak * share),
                        "--efficiency", str(efficiency),
                        "--memory-bandwidth", str(bandwidths[preset] * share), "--runnable-here",
                        "--intra-node-bandwidth", str(bandwidth[ranks]),
                        "--inter-node-bandwidth", str(bandwidth[ranks]),
                        "--collective-latency", str(fixed_latency),
                        "--intra-node-latency", str(step_latency), "--no-overlap", "--gpus", str(ranks),
                        "--gpus-per-node", str(ranks),
                        "--global-batch", str(args.batch * dp * args.accum),
                        "--precision", "fp32", "--fragmentation", "0", "--bucket-size", args.bucket_size,
                        "--tp", str(tp), "--pp", "1",
                        "--cp", "1", "--dp", str(dp), "--zero", str(zero), "--micro-batch",
                        str(args.batch), "--checkpoint", policy, "--offload", "none",
                        "--sequence-parallel" if sp else "--no-sequence-parallel", "--json"]
                    best = last_json(planned)["layouts"][0]
                    memory = best["memory_bytes"]
                    states = memory["weights"] + memory["gradients"] + memory["master"] + memory["optimizer"]
                    # The peak of the rank that reached the highest (no pipeline: the planner's one
                    # figure is every rank's).
                    rank = max(measured["ranks"], key=lambda r: r["peak_bytes"])
                    peak_ratio = rank["peak_bytes"] / memory["total"]
                    step_ratio = measured["step_ms"] / (1000 * best["step_s"])
                    # The step split in two: the training thread blocked on collectives (the run's
                    # median comm_wait_ms; the planner's exposed tensor, context and data parts)
                    # and everything else.
                    parts = best["time_s"]
                    wait_pred = 1000 * (parts["tensor"] + parts["experts"] + parts["context"] +
                                        parts["data"])
                    wait = rank["comm_wait_ms"]
                    exchange = (f'{rank["dispatch_ms"]:.0f} / {1000 * parts["experts"]:.0f}'
                                if ep > 1 else "-")
                    mib = 1024 * 1024
                    loaded = "- | - | -"
                    if ep > 1:
                        rank_load, block_load, expert_load = most_loads(db, measured["run_id"])
                        at_load = last_json(planned + [
                            "--expert-rank-load", repr(rank_load), "--expert-block-load",
                            repr(block_load), "--expert-load", repr(expert_load)])["layouts"][0]
                        total = at_load["memory_bytes"]["total"]
                        loaded = (f'{rank_load:.3f} / {block_load:.3f} / {expert_load:.2f} | '
                                  f'{total / mib:.1f} | {rank["peak_bytes"] / total:.3f}')
                    print(f'| {preset} | {label} | {policy} | {rank["peak_bytes"] / mib:.1f} / '
                          f'{memory["total"] / mib:.1f} | {peak_ratio:.3f} | '
                          f'{rank["peak_activation_bytes"] / mib:.1f} / '
                          f'{(memory["activations"] + memory["buffers"]) / mib:.1f} | '
                          f'{rank["model_state_bytes"] / mib:.1f} / {states / mib:.1f} | '
                          f'{measured["step_ms"]:.0f} / {1000 * best["step_s"]:.0f} | {step_ratio:.2f} | '
                          f'{wait:.0f} / {wait_pred:.0f} | ' + (f'{exchange} | ' if args.moe else '') +
                          f'{measured["step_ms"] - wait:.0f} / {1000 * best["step_s"] - wait_pred:.0f} |' +
                          (f' {loaded} |' if args.moe else ''))
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
