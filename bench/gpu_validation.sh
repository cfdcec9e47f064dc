#!/usr/bin/env bash
# The GPU validation (issue #7) in one call, sized for a short lease on a machine with one GPU,
# CMake, ninja and Python's PyTorch but no network, no Qt and no package installs:
#   1. unpack the .deb files brought along (sqlite3, nlohmann-json, CLI11, GoogleTest) into a local
#      prefix and build the engine, the CLI and the tests with the GUI off;
#   2. run the CUDA-only tests (one at a time: one of them fills the device on purpose);
#   3. run the gradient check for every policy on CUDA, deterministic;
#   4. measure the article's table: gpt2-350m, seq_len 1024, bf16, under a 40 GiB budget;
#   5. the NCCL path (docs/distributed.md): data parallel runs on CUDA, sharded, one rank per GPU
#      (one GPU: a world of one, which still runs every collective through NCCL);
#   6. run the rest of the suite (CPU tests, already green in CI) if time is left.
# Everything lands in $OUT/gpu-results.md (./gpu-out without $OUT), written as it goes, so a run
# stopped at its limit still leaves what it measured.
#
#   bench/gpu_validation.sh prepare        # with network: the .deb files into build-gpu/debs/
#   bench/gpu_validation.sh                # on the GPU machine (docs/gpu-validation.md)
#   bench/gpu_validation.sh --cpu-dry-run  # the same steps on the CPU with a tiny model
#
# Environment: TORCH_CMAKE_PREFIX (else asked from python3's torch), REMATLAB_BUILD_DIR,
# REMATLAB_REUSE_BUILD=1 (use an existing build: configure is still checked, nothing is compiled),
# TIME_BUDGET_S (seconds for the whole script; default 540).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DEBS="$ROOT/build-gpu/debs"
MODE="gpu"
case "${1:-}" in
  prepare) MODE="prepare" ;;
  --cpu-dry-run) MODE="dry" ;;
  "") ;;
  *) echo "usage: $0 [prepare | --cpu-dry-run]" >&2; exit 2 ;;
esac

if [[ "$MODE" == "prepare" ]]; then
  mkdir -p "$DEBS"
  cd "$DEBS"
  apt-get download libsqlite3-dev libsqlite3-0 nlohmann-json3-dev libcli11-dev libgtest-dev \
    libgloo-dev
  ls -l "$DEBS"
  exit 0
fi

START=$(date +%s)
BUDGET_S="${TIME_BUDGET_S:-540}"
elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }

if [[ "$MODE" == "gpu" ]]; then
  DEVICE="cuda"; PRESET="gpt2-350m"; SEQ=1024; PRECISION="bf16"; BUDGET="40GiB"
  LIMIT=256; STEPS=4; CHECK_ARGS="--preset gpt2-350m --batch 2 --dropout 0.1"
  STRATEGIES=("none" "every:1" "every:1+host" "sublayer:1,2" "selective")
  BUILD="${REMATLAB_BUILD_DIR:-$ROOT/build-gpu/build}"
else
  # The same path on the CPU: tiny model, small budget, disk in place of host offload.
  DEVICE="cpu"; PRESET="tiny"; SEQ=64; PRECISION="fp32"; BUDGET="12MiB"
  LIMIT=64; STEPS=3; CHECK_ARGS="--preset tiny --layers 4 --batch 2 --dropout 0.1 --threads 1"
  STRATEGIES=("none" "every:1" "every:1+disk" "sublayer:1,2" "selective")
  BUILD="${REMATLAB_BUILD_DIR:-/tmp/rb-gpu-dry}"
fi
OUT_DIR="${OUT:-$ROOT/gpu-out}"
WORK="$ROOT/build-gpu/work"
PREFIX="$ROOT/build-gpu/prefix"
RESULTS="$OUT_DIR/gpu-results.md"
LOG="$OUT_DIR/gpu-validation.log"
mkdir -p "$OUT_DIR" "$WORK"
rm -f "$WORK"/*.sqlite* "$WORK"/*.json "$WORK"/*.txt
FAILURES=()

say() { echo "[$(elapsed)s] $*" | tee -a "$LOG" >&2; }
md() { printf '%s\n' "$@" >>"$RESULTS"; }
fail() { FAILURES+=("$1"); say "FAILED: $1"; }

# --- 1. prefix and build ---------------------------------------------------------------------

unpack_deb() {  # dpkg-deb where there is one, else the .deb's own ar archive
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$PREFIX"
  else
    local tmp
    tmp="$(mktemp -d)"
    (cd "$tmp" && ar x "$1" && tar -xf data.tar.* -C "$PREFIX")
    rm -rf "$tmp"
  fi
}

make_prefix() {
  ls "$DEBS"/*.deb >/dev/null 2>&1 || { say "no .deb files in $DEBS: run '$0 prepare' first"; exit 1; }
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  for deb in "$DEBS"/*.deb; do unpack_deb "$deb"; done
  LIBDIR="$PREFIX/usr/lib/x86_64-linux-gnu"
  for needed in "$PREFIX/usr/include/sqlite3.h" "$LIBDIR/libsqlite3.so" \
                "$PREFIX/usr/share/cmake/nlohmann_json" "$PREFIX/usr/share/cmake/CLI11" \
                "$LIBDIR/cmake/GTest" "$PREFIX/usr/include/gloo/config.h"; do
    [[ -e "$needed" ]] || { say "the prefix lacks $needed"; exit 1; }
  done
}

torch_prefix() {
  if [[ -n "${TORCH_CMAKE_PREFIX:-}" ]]; then echo "$TORCH_CMAKE_PREFIX"; return; fi
  python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'
}

configure() {  # $1: build directory
  cmake -S "$ROOT" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREMATLAB_BUILD_GUI=OFF \
    -DREMATLAB_WERROR=OFF \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX;$PREFIX/usr;$LIBDIR/cmake;$PREFIX/usr/share/cmake" \
    -DSQLite3_INCLUDE_DIR="$PREFIX/usr/include" -DSQLite3_LIBRARY="$LIBDIR/libsqlite3.so" \
    -DGTest_DIR="$LIBDIR/cmake/GTest" -Dnlohmann_json_DIR="$PREFIX/usr/share/cmake/nlohmann_json" \
    -DCLI11_DIR="$PREFIX/usr/share/cmake/CLI11" >>"$LOG" 2>&1
}

: >"$RESULTS"
md "# GPU validation results" "" "Written by \`bench/gpu_validation.sh\` (mode: $MODE) on $(date -u +%Y-%m-%dT%H:%M:%SZ)." ""
say "mode $MODE, results in $RESULTS"
make_prefix
TORCH_PREFIX="$(torch_prefix)"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
JOBS="$(nproc)"
if [[ "${REMATLAB_REUSE_BUILD:-0}" == "1" ]]; then
  # Configure a scratch directory exactly as the GPU run does (the prefix and find_package
  # paths), then use the existing build for the rest.
  configure "$WORK/configure-check" || { say "configure failed, see $LOG"; exit 1; }
  say "configure with the prefix: ok; reusing the build in $BUILD"
else
  configure "$BUILD" || { say "configure failed, see $LOG"; exit 1; }
  say "building with $JOBS jobs"
  ninja -C "$BUILD" -j "$JOBS" rematlab-cli rematlab_tests >>"$LOG" 2>&1 ||
    { say "build failed, see $LOG"; tail -40 "$LOG" >&2; exit 1; }
fi
CLI="$BUILD/app/rematlab-cli"
say "build ready"

md "## Machine" ""
if command -v nvidia-smi >/dev/null; then
  md '```' "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1)" '```'
else
  md "No nvidia-smi: no GPU (CPU dry run)." ""
fi
md "" '```' "$("$CLI" version 2>&1)" '```' ""
if [[ "${REMATLAB_REUSE_BUILD:-0}" == "1" ]]; then
  md "Build: configure checked with the .deb prefix; the existing build in $BUILD reused." ""
else
  md "Build: \`cmake -G Ninja -DREMATLAB_BUILD_GUI=OFF\` with the .deb prefix, \`ninja -j$JOBS\`; ready after $(elapsed) s." ""
fi

# --- 2. tests --------------------------------------------------------------------------------

CUDA_TESTS='CudaPath|CudaGradientCheck|HostOffloadOnCuda'

# Runs ctest with the given arguments; prints "passed skipped failed" counted from its lines.
run_ctest() {
  local name="$1"; shift
  (cd "$BUILD" && ctest --timeout 300 "$@") >"$WORK/ctest-$name.txt" 2>&1 || true
  cat "$WORK/ctest-$name.txt" >>"$LOG"
  local lines
  lines="$(grep -E 'Test +#[0-9]+:' "$WORK/ctest-$name.txt" || true)"
  echo "$(grep -c ' Passed' <<<"$lines" || true) $(grep -c 'Skipped' <<<"$lines" || true)" \
       "$(grep -cE '\*\*\*(Failed|Timeout|Exception)|Not Run' <<<"$lines" || true)"
}

say "CUDA tests"
read -r passed skipped failed < <(run_ctest cuda -j1 -R "$CUDA_TESTS")
md "## CUDA-only tests" "" "\`ctest -j1 -R '$CUDA_TESTS'\`: $passed passed, $skipped skipped, $failed failed." ""
if (( failed > 0 )); then
  fail "$failed CUDA test(s) failed"
  md '```' "$(grep -E '\*\*\*(Failed|Timeout|Exception)' "$WORK/ctest-cuda.txt")" '```' ""
fi
if [[ "$MODE" == "gpu" ]] && (( skipped > 0 || passed == 0 )); then
  fail "CUDA tests were skipped on a GPU machine ($skipped skipped, $passed ran)"
  md "**CUDA TESTS DID NOT RUN ON THE GPU** ($skipped skipped): see gpu-validation.log." ""
fi
say "CUDA tests: $passed passed, $skipped skipped, $failed failed"

# --- 3. gradient check -----------------------------------------------------------------------

say "gradient checks"
md "## Gradient check on $DEVICE (deterministic)" "" \
   "\`rematlab-cli check $CHECK_ARGS --device $DEVICE --deterministic --checkpoint P [--offload O] --json\`" "" \
   "| policy | identical | max abs diff | loss diff |" "|---|---|---|---|"
for strategy in "${STRATEGIES[@]}" "every:2"; do
  [[ "$strategy" == "none" ]] && continue
  policy="${strategy%%+*}"
  offload="none"
  [[ "$strategy" == *+* ]] && offload="${strategy#*+}"
  [[ "$offload" == "disk" ]] && offload="disk:$WORK"
  # shellcheck disable=SC2086  # CHECK_ARGS is a list of flags
  if line="$("$CLI" check $CHECK_ARGS --device "$DEVICE" --deterministic --checkpoint "$policy" \
                --offload "$offload" --json 2>>"$LOG" | tail -1)"; then
    row="$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%s | %.3g | %.3g" % ("yes" if r["identical"] else "**NO**", r["max_abs_diff"], r["loss_diff"]))' "$line")"
    [[ "$row" == yes* ]] || fail "gradient check $strategy not identical"
  else
    row="error (see log) | - | -"
    fail "gradient check $strategy failed to run"
  fi
  md "| $strategy | $row |"
done
md ""
say "gradient checks done"

# --- 4. the article's table ------------------------------------------------------------------

write_spec() {  # $1 file, $2 strategy
  local policy="${2%%+*}" offload="none"
  [[ "$2" == *+* ]] && offload="${2#*+}"
  [[ "$offload" == "disk" ]] && offload="disk:$WORK"
  local threads=""
  [[ "$DEVICE" == "cpu" ]] && threads=', "threads": 2'
  cat >"$1" <<EOF
{
  "name": "gpu validation $2",
  "base": { "preset": "$PRESET", "seq_len": $SEQ, "precision": "$PRECISION", "device": "$DEVICE",
            "steps": $STEPS, "warmup_steps": 1, "checkpoint": "$policy", "offload": "$offload"$threads },
  "max_batch": { "budget": "$BUDGET", "limit": $LIMIT, "probe_steps": 2 }
}
EOF
}

md "## The article's table: $PRESET, seq_len $SEQ, $PRECISION, budget $BUDGET" "" \
   "Per strategy: \`rematlab-cli sweep --spec SPEC.json --db runs.sqlite --json\` with" \
   "\`\"max_batch\": {\"budget\": \"$BUDGET\", \"limit\": $LIMIT, \"probe_steps\": 2}\` and $STEPS steps" \
   "(1 warm-up) at the batch found. The spec of the first row:" "" '```json'
write_spec "$WORK/spec-0.json" "${STRATEGIES[0]}"
md "$(cat "$WORK/spec-0.json")" '```' ""
say "table"
index=0
for strategy in "${STRATEGIES[@]}"; do
  remaining=$(( $(left) - 60 ))  # keep a minute for the CPU tests' verdict and the write-up
  if (( remaining < 20 )); then
    say "no time left for $strategy"
    echo "{\"label\": \"$strategy\", \"status\": \"not run (time)\"}" >"$WORK/row-$index.json"
  else
    write_spec "$WORK/spec-$index.json" "$strategy"
    t0=$(date +%s)
    timeout "$remaining" "$CLI" sweep --spec "$WORK/spec-$index.json" --db "$WORK/runs.sqlite" \
      --json >"$WORK/sweep-$index.txt" 2>>"$LOG" || say "sweep for $strategy ended with $?"
    python3 - "$strategy" "$(( $(date +%s) - t0 ))" "$WORK/sweep-$index.txt" >"$WORK/row-$index.json" <<'EOF'
import json, sys
label, seconds, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
if not lines:
    print(json.dumps({"label": label, "status": "no result (timeout or error)", "seconds": seconds}))
else:
    run = json.loads(lines[-1])["runs"][0]
    run["label"], run["seconds"] = label, seconds
    print(json.dumps(run))
EOF
    cat "$WORK/sweep-$index.txt" >>"$LOG"
  fi
  say "  $strategy: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("status"), "batch", r.get("max_batch"))' "$WORK/row-$index.json")"
  index=$(( index + 1 ))
done

python3 - "$WORK" "$index" >>"$RESULTS" <<'EOF'
import json, sys
work, count = sys.argv[1], int(sys.argv[2])
rows = [json.load(open(f"{work}/row-{i}.json")) for i in range(count)]
base = rows[0] if rows and rows[0].get("status") == "ok" else None
def gib(b):
    if not b: return "-"
    return "%.2f GiB" % (b / 2**30) if b >= 2**30 else "%.2f MiB" % (b / 2**20)
def ratio(value, key):
    return "%.2f×" % (value / base[key]) if base and base.get(key) and value else "-"
print("| strategy | status | max batch | vs base | peak (allocated) | vs base | reserved | device used | tokens/s | vs base | probes | seconds |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    ok = r.get("status") == "ok"
    mb = r.get("max_batch", 0)
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r["label"], r.get("status"), mb or "-", ratio(mb, "max_batch") if ok else "-",
        gib(r.get("peak_bytes")) if ok else "-", ratio(r.get("peak_bytes", 0), "peak_bytes") if ok else "-",
        gib(r.get("reserved_bytes")) if ok else "-", gib(r.get("device_used_bytes")) if ok else "-",
        "%.0f" % r["tokens_per_s"] if ok else "-", ratio(r.get("tokens_per_s", 0), "tokens_per_s") if ok else "-",
        len(r.get("trials", [])), r.get("seconds", "-")))
print()
print("Peak is the allocator's allocated peak (what the budget is checked against); reserved is the")
print("caching allocator's, device used is total minus free from cudaMemGetInfo (what nvidia-smi")
print("shows, CUDA context included); both 0 on the CPU. Ratios are to the first row (Baseline `none`).")
print()
EOF
say "table done"

# --- 5. the NCCL path ------------------------------------------------------------------------

# One rank per GPU (Gloo on the CPU in the dry run). With one GPU, --shard over a world of one
# still issues every collective (all-reduce, reduce-scatter, all-gather) through NCCL.
if [[ "$MODE" == "gpu" ]]; then
  RANKS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  DP_ARGS="--preset gpt2-124m --device cuda --precision bf16 --batch 4 --steps 4 --checkpoint every:1"
else
  RANKS=2
  DP_ARGS="--preset tiny --threads 1 --batch 4 --steps 4 --checkpoint every:1"
fi
(( RANKS >= 1 )) || RANKS=1
md "## Data parallel ($DEVICE, $RANKS rank(s): NCCL on CUDA, Gloo on the CPU)" "" \
   "\`rematlab-cli run $DP_ARGS --shard S [--nproc $RANKS] --json\`" "" \
   "| shard | status | ranks | final loss | rank 0 model states | rank 0 peak | comm ms | hidden ms | wait ms | tokens/s |" \
   "|---|---|---|---|---|---|---|---|---|---|"
for shard in none optimizer gradients; do
  if (( $(left) < 90 )); then md "| $shard | not run (time) | | | | | | | | |"; continue; fi
  nproc_flag=()
  (( RANKS > 1 )) && nproc_flag=(--nproc "$RANKS")
  # shellcheck disable=SC2086  # DP_ARGS is a list of flags
  if line="$(timeout 300 "$CLI" run $DP_ARGS --shard "$shard" "${nproc_flag[@]}" --dist-timeout 60 \
                --json 2>>"$LOG" | tail -1)"; then
    row="$(python3 -c '
import json, sys
r = json.loads(sys.argv[1]); k = (r.get("ranks") or [{}])[0]
mib = lambda b: "%.1f MiB" % (b / 2**20)
states = k.get("param_bytes", 0) + k.get("grad_bytes", 0) + k.get("optimizer_bytes", 0)
print("%s | %d | %.4f | %s | %s | %.1f | %.1f | %.1f | %.0f" % (r["status"], len(r.get("ranks") or [1]),
      r["final_loss"], mib(states) if states else "-", mib(r["peak_bytes"]), r.get("comm_ms", 0),
      r.get("comm_hidden_ms", 0), r.get("comm_wait_ms", 0), r["tokens_per_s"]))' "$line")"
    [[ "$row" == ok* ]] || fail "data parallel --shard $shard did not end ok"
  else
    row="error (see log) | | | | | | | | |"
    fail "data parallel --shard $shard failed to run"
  fi
  md "| $shard | $row |"
done
md ""
say "data parallel done"

# --- 6. the rest of the suite ----------------------------------------------------------------

remaining=$(( $(left) - 10 ))
if (( remaining > 30 )); then
  say "CPU tests (${remaining}s left)"
  read -r passed skipped failed < <(run_ctest cpu -j "$JOBS" -E "$CUDA_TESTS" --stop-time \
    "$(date -d "+${remaining} seconds" +%H:%M:%S)")
  md "## The rest of the suite" "" "\`ctest -j$JOBS -E '$CUDA_TESTS'\`: $passed passed, $skipped skipped, $failed failed or not run (ctest stops at the time budget)." ""
  (( failed == 0 )) || md '```' "$(grep -E '\*\*\*(Failed|Timeout|Exception)' "$WORK/ctest-cpu.txt" | head -20)" '```' ""
  say "CPU tests: $passed passed, $skipped skipped, $failed failed or not run"
else
  md "## The rest of the suite" "" "Not run: no time left (it passes in CI on the CPU)." ""
fi

md "## Verdict" ""
if (( ${#FAILURES[@]} == 0 )); then
  md "Everything above ran; no failures. Total $(elapsed) s."
else
  for failure in "${FAILURES[@]}"; do md "- FAILED: $failure"; done
  md "" "Total $(elapsed) s."
fi
say "done in $(elapsed)s: $RESULTS"
cat "$RESULTS"
(( ${#FAILURES[@]} == 0 ))
