#!/usr/bin/env bash
# The GPU validation (issue #7) in one call, sized for a short lease on a machine with one GPU,
# CMake, ninja and Python's PyTorch but no network, no Qt and no package installs:
#   1. unpack the .deb files brought along (sqlite3, nlohmann-json, CLI11, GoogleTest) into a local
#      prefix and build the engine, the CLI and the tests with the GUI off;
#   2. run the CUDA-only tests (one at a time: one of them fills the device on purpose);
#   3. run the gradient check for every policy on CUDA, deterministic, for GPT and for Llama;
#   4. one llama3.2-1b bf16 run at seq_len 2048 with the loss whole and in slices (--loss-chunks
#      auto), each against the estimator's prediction;
#   5. the NCCL path (docs/distributed.md): data parallel runs on CUDA, sharded (parameters too,
#      in fp32), over a world of one (which still runs every collective through NCCL) and one
#      rank per GPU where there are more; then two tensor ranks (docs/parallel.md), with and without sequence parallelism,
#      each rank's activation peak against the estimator's, where there are two GPUs;
#   5c. a plan:BUDGET run, the plan's predicted activation peak and step time against measured;
#   5d. the layout planner for this GPU (--gpu local) against step 4's measured step;
#   5e. a PP 4 x V 2 pipeline on the CPU with a core per rank: its bubble against the planner's;
#   6. measure the article's table: gpt2-350m, seq_len 1024, bf16, under a 40 GiB budget;
#   7. the same table for llama3.2-1b at seq_len 2048, if time is left (optional: last);
#   8. run the rest of the suite (CPU tests, already green in CI) if time is left.
# The short, required steps come before the tables, which take whatever time the budget leaves.
# Everything lands in $OUT/gpu-results.md (./gpu-out without $OUT), written as it goes, so a run
# stopped at its limit still leaves what it measured.
#
#   bench/gpu_validation.sh prepare        # with network: the .deb files into build-gpu/debs/
#   bench/gpu_validation.sh                # on the GPU machine (docs/gpu-validation.md)
#   bench/gpu_validation.sh --cpu-dry-run  # the same steps on the CPU with a tiny model
#
# Environment: REMATLAB_PREBUILT (a folder of the checkout holding a build carried from a
# development checkout against the same LibTorch: app/rematlab-cli, tests/rematlab_tests; nothing
# is compiled then), TORCH_CMAKE_PREFIX (else asked from python3's torch), REMATLAB_BUILD_DIR,
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
  LLAMA_CHECK_ARGS="--preset llama-small --batch 2 --dropout 0.1"
  STRATEGIES=("none" "every:1" "every:1+host" "sublayer:1,2" "selective")
  # Step 4's shape, as `run` flags and as the same shape for `estimate`.
  LLAMA_RUN_ARGS="--preset llama3.2-1b --seq-len 2048 --precision bf16 --device cuda"
  LLAMA_EST_ARGS="--model llama3.2-1b --seq-len 2048 --precision bf16"
  LLAMA_BATCH=4
  # Step 7: the table's shape for Llama (the logits over 128256 tokens in slices, as a user would).
  LLAMA_PRESET="llama3.2-1b"; LLAMA_SEQ=2048; LLAMA_LIMIT=64
  # Step 5c: a planned run whose budget lies between every:1's activations (5.4 GiB) and none's (17 GiB).
  PLAN_ARGS="--preset gpt2-350m --seq-len 1024 --precision bf16 --device cuda --batch 16"; PLAN_BUDGET="8GiB"
  # Step 5e: docs/pipeline.md's PP 4 x V 2 rows for small (none and the per-stage plan), on CPU
  # cores of its own.
  PIPE_ARGS="--stages 4 --accum 8 --virtual-stages 2 --presets small --policies none,plan:158MiB"
  BUILD="${REMATLAB_BUILD_DIR:-$ROOT/build-gpu/build}"
else
  # The same path on the CPU: tiny models, small budget, disk in place of host offload; step 4's
  # vocabulary is widened so that --loss-chunks auto makes more than one slice.
  DEVICE="cpu"; PRESET="tiny"; SEQ=64; PRECISION="fp32"; BUDGET="12MiB"
  LIMIT=64; STEPS=3; CHECK_ARGS="--preset tiny --layers 4 --batch 2 --dropout 0.1 --threads 1"
  LLAMA_CHECK_ARGS="--preset llama-tiny --layers 4 --batch 2 --dropout 0.1 --threads 1"
  STRATEGIES=("none" "every:1" "every:1+disk" "sublayer:1,2" "selective")
  LLAMA_RUN_ARGS="--preset llama-tiny --vocab 4096 --seq-len 64 --precision fp32 --device cpu --threads 2"
  LLAMA_EST_ARGS="--model llama-tiny --vocab 4096 --seq-len 64 --precision fp32"
  LLAMA_BATCH=4
  LLAMA_PRESET="llama-tiny"; LLAMA_SEQ=64; LLAMA_LIMIT=64
  PLAN_ARGS="--preset tiny --layers 4 --seq-len 64 --batch 4 --threads 1"; PLAN_BUDGET="3MiB"
  PIPE_ARGS="--stages 2 --accum 4 --virtual-stages 2 --presets small --policies none --seq-len 64 --batch 2"
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

torch_python() {  # the GPU machine's python3 has torch; a development checkout has .venv
  if ! python3 -c 'import torch' 2>/dev/null && [[ -x "$ROOT/.venv/bin/python" ]]; then
    echo "$ROOT/.venv/bin/python"
  else
    echo python3
  fi
}

torch_prefix() {
  if [[ -n "${TORCH_CMAKE_PREFIX:-}" ]]; then echo "$TORCH_CMAKE_PREFIX"; return; fi
  "$(torch_python)" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'
}

# A build made in a development checkout against the same LibTorch (REMATLAB_PREBUILT, a folder
# of the checkout with app/rematlab-cli and tests/rematlab_tests carried): it saves the build's
# minutes of a short lease. Its libraries are this machine's torch (its lib folder and CUDA
# runtime first on the path); the paths compiled into the tests (the CLI, the examples) name the
# checkout it was built in, which is made to point here. Returns non-zero when it cannot run,
# and the script builds instead.
use_prebuilt() {  # $1: the carried build folder
  [[ -x "$1/app/rematlab-cli" && -x "$1/tests/rematlab_tests" ]] || { say "no carried build in $1"; return 1; }
  local torch_lib cudart built_root
  torch_lib="$("$(torch_python)" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>>"$LOG")" ||
    { say "python3 has no torch for the carried build"; return 1; }
  cudart="$(find "$torch_lib/../../nvidia" /usr/local/cuda/lib64 /usr/local/cuda/lib -name 'libcudart.so.13' 2>/dev/null | head -1)"
  export LD_LIBRARY_PATH="$torch_lib${cudart:+:$(dirname "$cudart")}:$LD_LIBRARY_PATH"
  built_root="$(grep -a -o -m1 -E '/[[:alnum:]/._+-]+/app/rematlab-cli' "$1/tests/rematlab_tests" | head -1)"
  built_root="${built_root%/*/app/rematlab-cli}"
  if [[ -n "$built_root" && "$built_root" != "$ROOT" && ! -e "$built_root" ]]; then
    if mkdir -p "$(dirname "$built_root")" && ln -s "$ROOT" "$built_root"; then
      say "the carried build's checkout $built_root points here"
    else
      say "cannot point $built_root here: the tests that start the CLI will fail"
    fi
  fi
  "$1/app/rematlab-cli" version >>"$LOG" 2>&1 || { say "the carried build does not start here (see $LOG)"; return 1; }
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
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
JOBS="$(nproc)"
BUILD_NOTE=""
if [[ -n "${REMATLAB_PREBUILT:-}" ]] && use_prebuilt "$ROOT/$REMATLAB_PREBUILT"; then
  BUILD="$ROOT/$REMATLAB_PREBUILT"
  BUILD_NOTE="Build: carried from a development checkout built against the same LibTorch, run against this machine's ($("$(torch_python)" -c 'import torch; print(torch.__version__)' 2>>"$LOG")); nothing compiled here."
  say "using the carried build in $BUILD"
elif [[ "${REMATLAB_REUSE_BUILD:-0}" == "1" ]]; then
  # Configure a scratch directory exactly as the GPU run does (the prefix and find_package
  # paths), then use the existing build for the rest.
  TORCH_PREFIX="$(torch_prefix)"
  configure "$WORK/configure-check" || { say "configure failed, see $LOG"; exit 1; }
  say "configure with the prefix: ok; reusing the build in $BUILD"
  BUILD_NOTE="Build: configure checked with the .deb prefix; the existing build in $BUILD reused."
else
  TORCH_PREFIX="$(torch_prefix)"
  configure "$BUILD" || { say "configure failed, see $LOG"; exit 1; }
  say "building with $JOBS jobs"
  ninja -C "$BUILD" -j "$JOBS" rematlab-cli rematlab_tests >>"$LOG" 2>&1 ||
    { say "build failed, see $LOG"; tail -40 "$LOG" >&2; exit 1; }
  BUILD_NOTE="Build: \`cmake -G Ninja -DREMATLAB_BUILD_GUI=OFF\` with the .deb prefix, \`ninja -j$JOBS\`; ready after $(elapsed) s."
fi
CLI="$BUILD/app/rematlab-cli"
say "build ready"

md "## Machine" ""
if command -v nvidia-smi >/dev/null; then
  md '```' "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1)" '```'
else
  md "No nvidia-smi: no GPU (CPU dry run)." ""
fi
md "" '```' "$("$CLI" version 2>&1)" '```' "" "$BUILD_NOTE" ""

# --- 2. tests --------------------------------------------------------------------------------

CUDA_TESTS='CudaPath|CudaGradientCheck|HostOffloadOnCuda'

# Runs ctest with the given arguments; prints "passed skipped failed cut" counted from its lines,
# cut being the tests that timed out or never ran (with --stop-time: those the budget cut; ctest
# prints no line for a test it never started, hence the count from its "k/N" total).
run_ctest() {  # with one argument only: count what run_gtest_each wrote
  local name="$1"; shift
  (( $# == 0 )) || (cd "$BUILD" && ctest --timeout 300 "$@") >"$WORK/ctest-$name.txt" 2>&1 || true
  cat "$WORK/ctest-$name.txt" >>"$LOG"
  local lines
  lines="$(grep -E 'Test +#[0-9]+:' "$WORK/ctest-$name.txt" || true)"
  local passed skipped failed total
  # The verdict after the dots, never a word in a test's name.
  passed="$(grep -cE '\.{3,} +Passed' <<<"$lines" || true)"
  skipped="$(grep -cE '\.{3,} *(\*\*\*)?Skipped' <<<"$lines" || true)"
  failed="$(grep -cE '\.{3,} *\*\*\*(Failed|Exception)' <<<"$lines" || true)"
  total="${TESTS_LISTED:-$(sed -nE 's|^ *[0-9]+/([0-9]+) Test.*|\1|p' <<<"$lines" | head -1)}"
  echo "$passed $skipped $failed $(( ${total:-0} - passed - skipped - failed ))"
}

# A carried build has no ctest files: each test of rematlab_tests then runs in a process of its
# own, as under ctest, and prints a line in ctest's form so that run_ctest's counts read it.
gtest_one() {  # $1 test binary, $2 time after which no test starts (and 50 s on, all end), $3 total, $4 the test
  (( $(date +%s) < $2 )) || return 0
  local out rc verdict
  local limit=$(( $2 + 50 - $(date +%s) ))
  (( limit < 300 )) || limit=300
  out="$(timeout "$limit" "$1" --gtest_filter="$4" 2>&1)"; rc=$?
  if (( rc == 124 )); then verdict="***Timeout"
  elif grep -q '^\[  SKIPPED \]' <<<"$out"; then verdict="Skipped"
  elif (( rc == 0 )); then verdict="Passed"
  else verdict="***Failed"; fi
  printf '%s\n' "$out" >&2
  printf '0/%s Test #0: %s ... %s\n' "$3" "$4" "$verdict"
}
export -f gtest_one

run_gtest_each() {  # $1 name, $2 gtest filter, $3 parallel processes, $4 seconds to start tests in
  local name="$1" list="$WORK/gtests-$1.list" total
  { "$BUILD/tests/rematlab_tests" --gtest_list_tests --gtest_filter="$2" 2>>"$LOG" || true; } |
    awk '/^[^ ]/ { suite = $1; next } { print suite $1 }' >"$list"
  total="$(wc -l <"$list")"
  xargs -P "$3" -I{} bash -c 'gtest_one "$@"' _ "$BUILD/tests/rematlab_tests" \
    "$(( $(date +%s) + $4 ))" "$total" {} <"$list" >"$WORK/ctest-$name.txt" 2>>"$LOG" || true
  TESTS_LISTED="$total" run_ctest "$name"  # tests never started count as cut
}

say "CUDA tests"
if [[ -f "$BUILD/tests/CTestTestfile.cmake" ]]; then
  read -r passed skipped failed cut < <(run_ctest cuda -j1 -R "$CUDA_TESTS")
else
  read -r passed skipped failed cut < <(run_gtest_each cuda "*${CUDA_TESTS//|/*:*}*" 1 $(( $(left) - 60 )))
fi
failed=$(( failed + cut ))  # no --stop-time here: a timeout is a failure
TESTS_RUN_BY="\`ctest -j1 -R '$CUDA_TESTS'\`"
[[ -f "$BUILD/tests/CTestTestfile.cmake" ]] ||
  TESTS_RUN_BY="\`rematlab_tests --gtest_filter=TEST\` for each test matching '$CUDA_TESTS', one at a time"
md "## CUDA-only tests" "" "$TESTS_RUN_BY: $passed passed, $skipped skipped, $failed failed." ""
if (( failed > 0 )); then
  fail "$failed CUDA test(s) failed"
  md '```' "$(grep -E '\*\*\*(Failed|Timeout|Exception)' "$WORK/ctest-cuda.txt")" '```' ""
fi
if [[ "$MODE" == "gpu" ]] && (( skipped > 0 || passed == 0 )); then
  fail "CUDA tests were skipped on a GPU machine ($skipped skipped, $passed ran)"
  md "**CUDA TESTS DID NOT RUN ON THE GPU** ($skipped skipped): see gpu-validation.log." ""
fi
say "CUDA tests: $passed passed, $skipped skipped, $failed failed"

# --- 3. gradient checks ----------------------------------------------------------------------

gradient_checks() {  # $1: family (GPT, Llama), $2: the model's check flags
  local family="$1" args="$2" strategy policy offload line row
  say "gradient checks ($family)"
  md "## Gradient check on $DEVICE, $family (deterministic)" "" \
     "\`rematlab-cli check $args --device $DEVICE --deterministic --checkpoint P [--offload O] --json\`" "" \
     "| policy | identical | max abs diff | loss diff |" "|---|---|---|---|"
  for strategy in "${STRATEGIES[@]}" "every:2"; do
    [[ "$strategy" == "none" ]] && continue
    policy="${strategy%%+*}"
    offload="none"
    [[ "$strategy" == *+* ]] && offload="${strategy#*+}"
    [[ "$offload" == "disk" ]] && offload="disk:$WORK"
    # shellcheck disable=SC2086  # args is a list of flags
    if line="$("$CLI" check $args --device "$DEVICE" --deterministic --checkpoint "$policy" \
                  --offload "$offload" --json 2>>"$LOG" | tail -1)"; then
      row="$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%s | %.3g | %.3g" % ("yes" if r["identical"] else "**NO**", r["max_abs_diff"], r["loss_diff"]))' "$line")"
      [[ "$row" == yes* ]] || fail "gradient check ($family) $strategy not identical"
    else
      row="error (see log) | - | -"
      fail "gradient check ($family) $strategy failed to run"
    fi
    md "| $strategy | $row |"
  done
  md ""
  say "gradient checks ($family) done"
}

gradient_checks GPT "$CHECK_ARGS"
gradient_checks Llama "$LLAMA_CHECK_ARGS"

# --- 4. one Llama step, the loss whole and in slices -----------------------------------------

# The measured peak of each against what `estimate` predicts for the same shape and batch: the
# point of slicing the loss is the logits over a 128256-token vocabulary, so the check is that
# both the memory saved and its prediction show, at the same loss.
say "llama step"
md "## One Llama step: the loss whole and in slices" "" \
   "\`rematlab-cli run $LLAMA_RUN_ARGS --batch $LLAMA_BATCH --steps 3 --warmup-steps 1 --loss-chunks N --json\`" \
   "(tokens/s: the median of the 2 steps after the warm-up; peak over all 3), against" \
   "\`rematlab-cli estimate $LLAMA_EST_ARGS --batch $LLAMA_BATCH --loss-chunks N --json\`." ""
for chunks in 1 auto; do
  if (( $(left) < 90 )); then
    echo '{"status": "not run (time)"}' >"$WORK/llama-step-$chunks.json"
    continue
  fi
  # shellcheck disable=SC2086  # the ARGS are lists of flags
  timeout 240 "$CLI" run $LLAMA_RUN_ARGS --batch "$LLAMA_BATCH" --steps 3 --warmup-steps 1 \
    --loss-chunks "$chunks" --json 2>>"$LOG" | tail -1 >"$WORK/llama-step-$chunks.json" ||
    fail "llama step --loss-chunks $chunks failed to run"
  # shellcheck disable=SC2086
  "$CLI" estimate $LLAMA_EST_ARGS --batch "$LLAMA_BATCH" --loss-chunks "$chunks" --json 2>>"$LOG" |
    tail -1 >"$WORK/llama-estimate-$chunks.json" || fail "estimate --loss-chunks $chunks failed"
done
if ! python3 - "$WORK" >>"$RESULTS" 2>>"$LOG" <<'PY'
import json, math, sys
work = sys.argv[1]
def load(path):
    try:
        text = open(path).read().strip()
        return json.loads(text) if text.startswith("{") else {"status": "error (see log)"}
    except OSError:
        return {"status": "error (see log)"}
def gib(b):
    return "%.2f GiB" % (b / 2**30) if b >= 2**30 else "%.2f MiB" % (b / 2**20)
def error(measured, predicted):
    return "%+.1f%%" % (100.0 * (predicted - measured) / measured) if measured else "-"
rows = []
for chunks in ("1", "auto"):
    run, est = load(f"{work}/llama-step-{chunks}.json"), load(f"{work}/llama-estimate-{chunks}.json")
    rows.append((chunks, run, est))
print("| loss chunks | status | peak (allocated) | predicted | error | activations peak | predicted | error | tokens/s | first loss | final loss |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
failed = False
for chunks, run, est in rows:
    if run.get("status") != "ok":
        print("| %s | %s | | | | | | | | | |" % (chunks, run.get("status")))
        failed = failed or run.get("status") != "not run (time)"
        continue
    label = chunks
    if chunks == "auto":
        label = "auto (%d)" % math.ceil(run["vocab"] / (4 * run["d_model"]))
    total, act = est.get("total_bytes"), est.get("activation_peak_bytes")
    print("| %s | ok | %s | %s | %s | %s | %s | %s | %.0f | %.4f | %.4f |" % (
        label, gib(run["peak_bytes"]), gib(total) if total else "-",
        error(run["peak_bytes"], total) if total else "-",
        gib(run["peak_activation_bytes"]), gib(act) if act else "-",
        error(run["peak_activation_bytes"], act) if act else "-",
        run["tokens_per_s"], run["first_loss"], run["final_loss"]))
print()
whole, sliced = rows[0][1], rows[1][1]
if whole.get("status") == "ok" and sliced.get("status") == "ok":
    saved = whole["peak_bytes"] - sliced["peak_bytes"]
    predicted = rows[0][2].get("total_bytes", 0) - rows[1][2].get("total_bytes", 0)
    print("Slicing the loss saved %s of peak (predicted: %s); tokens/s %.2f× the whole loss's; "
          "first-step loss differs by %.2g (the same weights and batch: only rounding differs)." % (
          gib(abs(saved)) if saved >= 0 else "-" + gib(-saved),
          gib(abs(predicted)) if predicted >= 0 else "-" + gib(-predicted),
          sliced["tokens_per_s"] / whole["tokens_per_s"], abs(sliced["first_loss"] - whole["first_loss"])))
    print()
print("Error is (predicted − measured) / measured; the measured activations peak is the allocated")
print("peak above the model states (`peak_activation_bytes`), the prediction `activation_peak_bytes`.")
print()
sys.exit(1 if failed else 0)
PY
then
  fail "llama step: a run did not end ok"
fi
say "llama step done"

# --- 5. the NCCL path ------------------------------------------------------------------------

# A world of one always: with --shard optimizer or gradients and no --nproc, `run` takes the
# data-parallel path in its own process (a process group of one on a free port), so even one GPU
# issues every collective (all-reduce, reduce-scatter, all-gather) through NCCL; --shard none
# over one rank is a plain run, the reference for the losses. Then one rank per GPU where there
# are several (the dry run: two ranks, Gloo on the CPU).
if [[ "$MODE" == "gpu" ]]; then
  # The GPUs this process may use: CUDA_VISIBLE_DEVICES where set (the ranks get one each).
  if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    RANKS="$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)"
  else
    RANKS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
  fi
  DP_ARGS="--preset gpt2-124m --device cuda --precision bf16 --batch 4 --steps 4 --checkpoint every:1"
else
  RANKS=2
  DP_ARGS="--preset tiny --threads 1 --batch 4 --steps 4 --checkpoint every:1"
fi
(( RANKS >= 1 )) || RANKS=1
WORLDS=(1)
(( RANKS > 1 )) && WORLDS+=("$RANKS")
md "## Data parallel ($DEVICE: NCCL on CUDA, Gloo on the CPU)" "" \
   "\`rematlab-cli run $DP_ARGS --shard S [--nproc N] --dist-timeout 60 --json\` (no \`--nproc\` for a world of one)" "" \
   "| world | shard | path | status | ranks | final loss | rank 0 model states | rank 0 peak | comm ms | hidden ms | wait ms | tokens/s |" \
   "|---|---|---|---|---|---|---|---|---|---|---|---|"
say "data parallel (worlds: ${WORLDS[*]})"
for world in "${WORLDS[@]}"; do
  for shard in none optimizer gradients parameters; do
    path="process group"
    (( world == 1 )) && [[ "$shard" == "none" ]] && path="plain run"
    # Fully sharded parameters train in fp32 only (docs/distributed.md says why).
    args="${DP_ARGS/--precision bf16/--precision fp32}"
    if (( $(left) < 90 )); then md "| $world | $shard | $path | not run (time) | | | | | | | | |"; continue; fi
    nproc_flag=()
    (( world > 1 )) && nproc_flag=(--nproc "$world")
    [[ "$shard" == "parameters" ]] || args="$DP_ARGS"
    # shellcheck disable=SC2086  # args is a list of flags
    if line="$(timeout 300 "$CLI" run $args --shard "$shard" "${nproc_flag[@]}" --dist-timeout 60 \
                  --json 2>>"$LOG" | tail -1)"; then
      row="$(python3 -c '
import json, sys
r = json.loads(sys.argv[1]); k = (r.get("ranks") or [{}])[0]
mib = lambda b: "%.1f MiB" % (b / 2**20)
states = k.get("param_bytes", 0) + k.get("grad_bytes", 0) + k.get("optimizer_bytes", 0)
print("%s | %d | %.4f | %s | %s | %.1f | %.1f | %.1f | %.0f" % (r["status"], r.get("world_size", 1),
      r["final_loss"], mib(states) if states else "-", mib(r["peak_bytes"]), r.get("comm_ms", 0),
      r.get("comm_hidden_ms", 0), r.get("comm_wait_ms", 0), r["tokens_per_s"]))' "$line")"
      [[ "$row" == ok* ]] || fail "data parallel world $world --shard $shard did not end ok"
    else
      row="error (see log) | | | | | | | | |"
      fail "data parallel world $world --shard $shard failed to run"
    fi
    md "| $world | $shard | $path | $row |"
  done
done
md "" "Ranks is the run's \`world_size\`. In a world of one the losses of the first three rows should" \
   "agree: the same batch, only the gradients' route differs (\`parameters\` runs in fp32)." ""
say "data parallel done"

# --- 5b. tensor parallelism over NCCL -----------------------------------------------------------

# Two tensor ranks (and sequence parallelism), each rank's activation peak beside the estimator's
# for that rank. NCCL refuses two ranks on one device, so a one-GPU machine skips it (the dry run
# runs it on Gloo).
if [[ "$MODE" == "gpu" ]]; then
  TP_ARGS="--preset llama-small --device cuda --batch 4 --steps 4 --checkpoint every:1"
else
  TP_ARGS="--preset llama-tiny --threads 1 --batch 4 --steps 4 --checkpoint every:1"
fi
md "" "## Tensor parallelism ($DEVICE: NCCL on CUDA, Gloo on the CPU)" ""
if (( RANKS < 2 )); then
  md "Not run: $RANKS device(s); two tensor ranks need two (NCCL refuses two ranks on one)."
else
  md "\`rematlab-cli run $TP_ARGS --nproc 2 --tp 2 [--sequence-parallel] --json\` against" \
     "\`rematlab-cli estimate\` with the same flags" "" \
     "| sp | status | final loss | rank 0 activation peak | predicted | predicted/measured | comm ms | tokens/s |" \
     "|---|---|---|---|---|---|---|---|"
  for sp in off on; do
    sp_flag=()
    [[ "$sp" == "on" ]] && sp_flag=(--sequence-parallel)
    if (( $(left) < 90 )); then md "| $sp | not run (time) | | | | | | |"; continue; fi
    preset="$(sed -E 's/.*--preset ([^ ]+).*/\1/' <<<"$TP_ARGS")"
    # shellcheck disable=SC2086  # TP_ARGS is a list of flags
    if line="$(timeout 300 "$CLI" run $TP_ARGS --nproc 2 --tp 2 "${sp_flag[@]}" --dist-timeout 60 \
                  --json 2>>"$LOG" | tail -1)" &&
       predicted="$("$CLI" estimate --model "$preset" --batch 4 --checkpoint every:1 --tp 2 \
                      "${sp_flag[@]}" --json 2>>"$LOG" | tail -1)"; then
      row="$(python3 -c '
import json, sys
r = json.loads(sys.argv[1]); p = json.loads(sys.argv[2]); k = r["ranks"][0]
mib = lambda b: "%.2f MiB" % (b / 2**20)
print("%s | %.4f | %s | %s | %.3f | %.1f | %.0f" % (r["status"], r["final_loss"],
      mib(k["peak_activation_bytes"]), mib(p["activation_peak_bytes"]),
      p["activation_peak_bytes"] / k["peak_activation_bytes"], k.get("comm_ms", 0),
      r["tokens_per_s"]))' "$line" "$predicted")"
      [[ "$row" == ok* ]] || fail "tensor parallel --tp 2 (sp $sp) did not end ok"
    else
      row="error (see log) | | | | | | |"
      fail "tensor parallel --tp 2 (sp $sp) failed to run"
    fi
    md "| $sp | $row |"
  done
fi
say "tensor parallel done"

# --- 5c. a planned run ---------------------------------------------------------------------------

# plan:BUDGET profiles the run's own chain on the device, chooses the fastest segments whose
# activations fit the budget, and trains them: its prediction beside what the run measured.
say "planned run"
md "## A planned run: \`plan:$PLAN_BUDGET\` on $DEVICE" "" \
   "\`rematlab-cli run $PLAN_ARGS --steps 3 --warmup-steps 1 --checkpoint plan:$PLAN_BUDGET --json\`" ""
# shellcheck disable=SC2086  # PLAN_ARGS is a list of flags
if (( $(left) < 90 )); then
  md "Not run (time)." ""
elif line="$(timeout $(( $(left) - 15 )) "$CLI" run $PLAN_ARGS --steps 3 --warmup-steps 1 \
               --checkpoint "plan:$PLAN_BUDGET" --json 2>>"$LOG" | tail -1)" &&
     python3 - "$line" >>"$RESULTS" 2>>"$LOG" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); p = r["plan"]
mib = lambda b: "%.2f GiB" % (b / 2**30) if b >= 2**30 else "%.2f MiB" % (b / 2**20)
print("| status | chosen | budget | activations peak | predicted | predicted/measured | step ms | predicted | predicted/measured | peak (allocated) | reserved | profile ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
print("| %s | `%s` | %s | %s | %s | %.3f | %.1f | %.1f | %.3f | %s | %s | %.0f |" % (
    r["status"], p["chosen"], mib(p["budget_bytes"]), mib(r["peak_activation_bytes"]),
    mib(p["predicted_peak_bytes"]), p["predicted_peak_bytes"] / r["peak_activation_bytes"],
    r["step_ms"], p["predicted_step_ms"], p["predicted_step_ms"] / r["step_ms"],
    mib(r["peak_bytes"]), mib(r["reserved_bytes"]) if r["reserved_bytes"] else "-", p["profile_ms"]))
print()
print("The budget bounds the activations (the allocated peak above the model states); the step")
print("time is the median after the warm-up.")
print()
sys.exit(0 if r["status"] == "ok" else 1)
PY
then
  say "planned run done"
else
  fail "planned run plan:$PLAN_BUDGET did not end ok"
  md "The planned run did not end ok (see gpu-validation.log)." ""
fi

# --- 5d. the layout planner against the measured step -------------------------------------------

# The layout planner for this machine's device (--gpu local: its memory and measured matmul peak)
# and the configuration step 4 measured with its loss in slices: one GPU, the same batch, no
# checkpointing. Its memory and step time beside what that run measured.
say "layout prediction"
LAYOUT_ARGS="$LLAMA_EST_ARGS --gpu local --device $DEVICE --gpus 1 --global-batch $LLAMA_BATCH --micro-batch $LLAMA_BATCH --checkpoint none --loss-chunks auto --top 1"
md "## The layout planner against the measured step" "" \
   "\`rematlab-cli layout $LAYOUT_ARGS --json\` against step 4's run with \`--loss-chunks auto\`." ""
# shellcheck disable=SC2086  # LAYOUT_ARGS is a list of flags
if (( $(left) < 30 )); then
  md "Not run (time)." ""
elif timeout $(( $(left) - 15 )) "$CLI" layout $LAYOUT_ARGS --json 2>>"$LOG" | tail -1 >"$WORK/layout.json" &&
   python3 - "$WORK/layout.json" "$WORK/llama-step-auto.json" >>"$RESULTS" 2>>"$LOG" <<'PY'
import json, sys
layout = json.load(open(sys.argv[1])); best = layout["layouts"][0]
text = open(sys.argv[2]).read().strip()
run = json.loads(text) if text.startswith("{") else {}
gib = lambda b: "%.2f GiB" % (b / 2**30) if b >= 2**30 else "%.2f MiB" % (b / 2**20)
m = best["memory_bytes"]
print("Device: %s." % layout["gpu_description"])
print()
print("| | memory | of which activations | step ms | tokens/s |")
print("|---|---|---|---|---|")
print("| predicted (fits: %s) | %s (%s allowance) | %s | %.1f | %.0f |" % (
    best["fits"], gib(m["total"]), gib(m["allowance"]), gib(m["activations"]),
    1000 * best["step_s"], best["tokens_per_s"]))
if run.get("status") == "ok":
    print("| measured | %s allocated, %s reserved | %s | %.1f | %.0f |" % (
        gib(run["peak_bytes"]), gib(run["reserved_bytes"]) if run.get("reserved_bytes") else "-",
        gib(run["peak_activation_bytes"]), run["step_ms"], run["tokens_per_s"]))
    print("| predicted/measured | %.3f of allocated | %.3f | %.3f | |" % (
        m["total"] / run["peak_bytes"], m["activations"] / run["peak_activation_bytes"],
        1000 * best["step_s"] / run["step_ms"]))
else:
    print("| measured | step 4's run: %s | | | |" % run.get("status", "missing"))
print()
print("The predicted memory includes the planner's fragmentation allowance; its time terms: %s." %
      ", ".join("%s %.1f ms" % (k, 1000 * v) for k, v in best["time_s"].items() if v))
print()
PY
then
  say "layout prediction done"
else
  fail "layout prediction failed"
  md "The layout planner's prediction failed (see gpu-validation.log)." ""
fi

# --- 5e. a pipeline's bubble with a core per rank ---------------------------------------------

# PP 4 x V 2 on this machine's CPU cores, one a rank: on the 2-core development machine four ranks
# shared two cores, and a rank idling left its core to the others, which evened out the stages'
# bubbles (0.16-0.25 of the step against 0.18-0.26 predicted stage by stage, docs/pipeline.md
# "Interleaved"); here nothing shares a core. The dry run checks the path only.
say "pipeline bubble"
md "## A pipeline's bubble with a core per rank (CPU)" "" \
   "\`python3 bench/pipeline_here.py $PIPE_ARGS\`, $(nproc) cores." ""
# shellcheck disable=SC2086  # PIPE_ARGS is a list of flags
if (( $(left) < 210 )); then
  md "Not run (time)." ""
elif timeout 180 python3 "$ROOT/bench/pipeline_here.py" --cli "$CLI" \
        --python "$(torch_python)" $PIPE_ARGS >>"$RESULTS" 2>>"$LOG"; then
  md ""
  say "pipeline bubble done"
else
  fail "pipeline bubble run failed or ran out of time"
  md "" "The pipeline run failed or ran past 180 s (see gpu-validation.log)." ""
fi

# --- 6 and 7. the article's table ------------------------------------------------------------

write_spec() {  # $1 file, $2 strategy, $3 preset, $4 seq_len, $5 extra base fields (", ..."), $6 limit
  local policy="${2%%+*}" offload="none"
  [[ "$2" == *+* ]] && offload="${2#*+}"
  [[ "$offload" == "disk" ]] && offload="disk:$WORK"
  local threads=""
  [[ "$DEVICE" == "cpu" ]] && threads=', "threads": 2'
  cat >"$1" <<SPEC
{
  "name": "gpu validation $3 $2",
  "base": { "preset": "$3", "seq_len": $4, "precision": "$PRECISION", "device": "$DEVICE",
            "steps": $STEPS, "warmup_steps": 1, "checkpoint": "$policy", "offload": "$offload"$threads$5 },
  "max_batch": { "budget": "$BUDGET", "limit": $6, "probe_steps": 2 }
}
SPEC
}

# $1 tag, $2 preset, $3 seq_len, $4 extra base fields, $5 batch limit, $6 seconds to keep for
# what follows, $7 fewest seconds worth starting a row with.
article_table() {
  local tag="$1" preset="$2" seq="$3" extra="$4" limit="$5" keep="$6" least="$7"
  local index=0 strategy remaining t0
  md "## The article's table: $preset, seq_len $seq, $PRECISION, budget $BUDGET" "" \
     "Per strategy: \`rematlab-cli sweep --spec SPEC.json --db runs.sqlite --json\` with" \
     "\`\"max_batch\": {\"budget\": \"$BUDGET\", \"limit\": $limit, \"probe_steps\": 2}\` and $STEPS steps" \
     "(1 warm-up) at the batch found. The spec of the first row:" "" '```json'
  write_spec "$WORK/spec-$tag-0.json" "${STRATEGIES[0]}" "$preset" "$seq" "$extra" "$limit"
  md "$(cat "$WORK/spec-$tag-0.json")" '```' ""
  say "table $preset"
  for strategy in "${STRATEGIES[@]}"; do
    remaining=$(( $(left) - keep ))
    if (( remaining < least )); then
      say "no time left for $strategy"
      echo "{\"label\": \"$strategy\", \"status\": \"not run (time)\"}" >"$WORK/row-$tag-$index.json"
    else
      write_spec "$WORK/spec-$tag-$index.json" "$strategy" "$preset" "$seq" "$extra" "$limit"
      t0=$(date +%s)
      timeout "$remaining" "$CLI" sweep --spec "$WORK/spec-$tag-$index.json" --db "$WORK/runs.sqlite" \
        --json >"$WORK/sweep-$tag-$index.txt" 2>>"$LOG" || say "sweep for $strategy ended with $?"
      python3 - "$strategy" "$(( $(date +%s) - t0 ))" "$WORK/sweep-$tag-$index.txt" \
        >"$WORK/row-$tag-$index.json" <<'PY'
import json, sys
label, seconds, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
if not lines:
    print(json.dumps({"label": label, "status": "no result (timeout or error)", "seconds": seconds}))
else:
    run = json.loads(lines[-1])["runs"][0]
    run["label"], run["seconds"] = label, seconds
    print(json.dumps(run))
PY
      cat "$WORK/sweep-$tag-$index.txt" >>"$LOG"
    fi
    say "  $strategy: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("status"), "batch", r.get("max_batch"))' "$WORK/row-$tag-$index.json")"
    index=$(( index + 1 ))
  done

  python3 - "$WORK" "$tag" "$index" >>"$RESULTS" <<'PY'
import json, sys
work, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [json.load(open(f"{work}/row-{tag}-{i}.json")) for i in range(count)]
base = rows[0] if rows and rows[0].get("status") == "ok" else None
def gib(b):
    if not b: return "-"
    return "%.2f GiB" % (b / 2**30) if b >= 2**30 else "%.2f MiB" % (b / 2**20)
def ratio(value, key):
    return "%.2f×" % (value / base[key]) if base and base.get(key) and value else "-"
print("| strategy | status | max batch | vs base | peak (allocated) | vs base | reserved | reserved − allocated | device used | tokens/s | vs base | MFU | probes | seconds |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    ok = r.get("status") == "ok"
    mb = r.get("max_batch", 0)
    gap = r.get("reserved_bytes", 0) - r.get("peak_bytes", 0)
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r["label"], r.get("status"), mb or "-", ratio(mb, "max_batch") if ok else "-",
        gib(r.get("peak_bytes")) if ok else "-", ratio(r.get("peak_bytes", 0), "peak_bytes") if ok else "-",
        gib(r.get("reserved_bytes")) if ok else "-",
        "%s (%.1f%%)" % (gib(gap), 100.0 * gap / r["peak_bytes"]) if ok and r.get("reserved_bytes") else "-",
        gib(r.get("device_used_bytes")) if ok else "-",
        "%.0f" % r["tokens_per_s"] if ok else "-", ratio(r.get("tokens_per_s", 0), "tokens_per_s") if ok else "-",
        "%.1f%%" % (100 * r["mfu"]) if ok and r.get("mfu") else "-",
        len(r.get("trials", [])), r.get("seconds", "-")))
print()
print("Peak is the allocator's allocated peak (what the budget is checked against); reserved is the")
print("caching allocator's (its gap above allocated: what the cache holds beyond the peak), device used is total minus free from cudaMemGetInfo (what nvidia-smi")
print("shows, CUDA context included); both 0 on the CPU. MFU is model FLOPs per second over the")
print("device's measured peak (`rematlab-cli peak`). Ratios are to the first row (Baseline `none`).")
print()
PY
  say "table $preset done"
}

# The GPT table first: it is the one the issue asks for. It keeps a minute for the CPU tests'
# verdict and the write-up; the Llama table (optional) then takes what is left, but only rows
# with time enough for a 1B model's search (in the dry run every row is quick).
article_table gpt "$PRESET" "$SEQ" "" "$LIMIT" 60 20
llama_least=20
[[ "$MODE" == "gpu" ]] && llama_least=90
article_table llama "$LLAMA_PRESET" "$LLAMA_SEQ" ', "loss_chunks": "auto"' "$LLAMA_LIMIT" 60 \
  "$llama_least"

# --- 8. the rest of the suite ----------------------------------------------------------------

remaining=$(( $(left) - 10 ))
if (( remaining > 30 )); then
  say "CPU tests (${remaining}s left)"
  # format_check reads the sources with clang-format, which the GPU machine lacks; CI runs it.
  if [[ -f "$BUILD/tests/CTestTestfile.cmake" ]]; then
    read -r passed skipped failed cut < <(run_ctest cpu -j "$JOBS" -E "$CUDA_TESTS|format_check" \
      --stop-time "$(date -d "+${remaining} seconds" +%H:%M:%S)")
    TESTS_RUN_BY="\`ctest -j$JOBS -E '$CUDA_TESTS|format_check'\`"
  else  # a carried build: rematlab_tests alone (the structure checks run in CI)
    read -r passed skipped failed cut < <(run_gtest_each cpu "-*${CUDA_TESTS//|/*:*}*" "$JOBS" \
      $(( remaining - 60 )))
    TESTS_RUN_BY="Each test of \`rematlab_tests\` but the CUDA ones, $JOBS at a time"
  fi
  md "## The rest of the suite" "" "$TESTS_RUN_BY: $passed passed, $skipped skipped, $failed failed, $cut cut short or not run (none starts after the time budget)." ""
  (( failed == 0 )) || fail "$failed CPU test(s) failed"
  unfinished="$(grep -E '\*\*\*(Failed|Timeout|Exception)|Not Run' "$WORK/ctest-cpu.txt" | sed -E 's/ \.{3,}/ …/' | head -20 || true)"
  [[ -z "$unfinished" ]] || md '```' "$unfinished" '```' ""
  say "CPU tests: $passed passed, $skipped skipped, $failed failed, $cut cut short or not run"
else
  md "## The rest of the suite" "" "Not run: no time left (it passes in CI on the CPU)." ""
fi

md "## Verdict" ""
if (( ${#FAILURES[@]} == 0 )); then
  md "No failures in what ran (rows marked not run and tests cut short are listed above). Total $(elapsed) s."
else
  for failure in "${FAILURES[@]}"; do md "- FAILED: $failure"; done
  md "" "Total $(elapsed) s."
fi
say "done in $(elapsed)s: $RESULTS"
cat "$RESULTS"
(( ${#FAILURES[@]} == 0 ))
