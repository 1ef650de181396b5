#!/usr/bin/env bash
# Data-parallel scaling, N ranks against one (docs/scale-out.md), on a build with MPI:
#   1. BM_StepAllReduce alone and as N ranks: µs per step with and without the all-reduce, at
#      B = 256 (reference net, plain and every auxiliary) and B = 4096 / 512 / 256 per rank;
#   2. `zerosync train --env market` for a fixed number of environment steps per rank, as one
#      process and as N ranks: environment and training steps per second;
#   3. `zerosync step` as N ranks for ZS_SCALE_STEPS steps: the ranks' parameter fingerprints
#      compared at the end (status 4 if they differ).
# On the GPU machine, after `ZS_MPI=1 bash scripts/gpu_run.sh` (which builds with MPI):
#   bash scripts/scale_run.sh build/cuda
# Here (hosts): bash scripts/scale_run.sh build/openmp. Results under $OUT (default
# /tmp/zs-out): scale-bench-{1,N}.json, scale-train.txt, scale-step.txt; a table last.
# ZS_SCALE_RANKS (default 2), ZS_SCALE_ENV_STEPS (per rank, default 200000), ZS_SCALE_STEPS
# (default 10000), ZS_SCALE_BENCH_FILTER (default BM_StepAllReduce).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin="${1:-build/cuda}/bin"
out="${OUT:-/tmp/zs-out}"
ranks="${ZS_SCALE_RANKS:-2}"
env_steps="${ZS_SCALE_ENV_STEPS:-200000}"
steps="${ZS_SCALE_STEPS:-10000}"
filter="${ZS_SCALE_BENCH_FILTER:-BM_StepAllReduce}"
mkdir -p "$out"
[ -x "$bin/zerosync" ] && [ -x "$bin/zerosync_bench" ] || { echo "scale_run: no zerosync and zerosync_bench in '$bin'"; exit 2; }
mpiexec=$(command -v mpiexec) || { echo "scale_run: no mpiexec on PATH (ZS_MPI=1 gpu_run.sh puts Open MPI there)"; exit 2; }
# NVLink multicast stays off on the shared GPU machines; passed on to every rank explicitly.
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=passive
launch=("$mpiexec" -n "$ranks" -x NCCL_NVLS_ENABLE -x OMP_NUM_THREADS -x OMP_WAIT_POLICY --bind-to none)
# Hosts: the cores shared out among the ranks (a GPU rank needs one thread for its stream).
threads=$(( $(nproc) / ranks )); [ "$threads" -ge 1 ] || threads=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$threads}"
status=0

echo "== 1. the step with and without the all-reduce"
"$bin/zerosync_bench" --benchmark_filter="$filter" --benchmark_out="$out/scale-bench-1.json" \
  --benchmark_out_format=json > "$out/scale-bench-1.txt" 2>&1 || { status=1; tail -5 "$out/scale-bench-1.txt"; }
"${launch[@]}" "$bin/zerosync_bench" --benchmark_filter="$filter" --benchmark_out="$out/scale-bench-$ranks.json" \
  --benchmark_out_format=json > "$out/scale-bench-$ranks.txt" 2>&1 || { status=1; tail -5 "$out/scale-bench-$ranks.txt"; }

echo "== 2. zerosync train --env market, $env_steps environment steps per rank"
train() {  # $1: label; the rest: the launcher, if any
  local label="$1"; shift
  local dir="$out/scale-train-$label"
  rm -rf "$dir"
  "$@" "$bin/zerosync" train --env market --steps "$env_steps" --out "$dir" --quiet > "$dir.log" 2>&1
  local rc=$?
  local line; line=$(grep -E "environment steps, [0-9]+ training steps in" "$dir.log" | tail -n1)
  echo "$label (status $rc): $line"
  [ "$rc" -eq 0 ] || { status=1; tail -5 "$dir.log"; }
}
{ train 1; train "$ranks" "${launch[@]}"; } | tee "$out/scale-train.txt"

echo "== 3. $steps steps as $ranks ranks: the parameters compared at the end"
python3 - "$out/scale-step" "$ranks" <<'PY'
import json, os, random, sys
sys.path.insert(0, "tools")
from compare_step import random_batch, write_safetensors
work, ranks = sys.argv[1], int(sys.argv[2])
os.makedirs(work, exist_ok=True)
cfg = {"seed": 7}
json.dump(cfg, open(os.path.join(work, "config.json"), "w"))
write_safetensors(os.path.join(work, "batch.safetensors"), random_batch(random.Random(7), cfg, 256 * ranks))
PY
"${launch[@]}" "$bin/zerosync" step --config "$out/scale-step/config.json" --batch "$out/scale-step/batch.safetensors" \
  --steps "$steps" --out "$out/scale-step/out.safetensors" > "$out/scale-step.txt" 2>&1
rc=$?
echo "zerosync step as $ranks ranks, $steps steps: status $rc (0: the ranks' parameters agree; 4: they differ)" | tee -a "$out/scale-step.txt"
[ "$rc" -eq 0 ] || { status=1; tail -5 "$out/scale-step.txt"; }

echo "== µs per step (BM_StepAllReduce), one process against $ranks ranks"
python3 - "$out/scale-bench-1.json" "$out/scale-bench-$ranks.json" <<'PY'
import json, sys
def load(p):
    try:
        return {b["run_name"]: b for b in json.load(open(p))["benchmarks"]}
    except (OSError, ValueError, KeyError) as e:
        print("scale_run: cannot read %s: %s" % (p, e)); return {}
one, many = load(sys.argv[1]), load(sys.argv[2])
def per_step(b):  # µs per step: the harness's own counter (an iteration is several steps)
    return b.get("us_per_call", b["real_time"])
print("%-75s %10s %10s" % ("µs per step", "1 process", "ranks"))
for name in one:
    a, b = one[name], many.get(name)
    print("%-75s %10.1f %10s" % (name.replace("/manual_time", ""), per_step(a), "%.1f" % per_step(b) if b else "-"))
PY
exit "$status"
