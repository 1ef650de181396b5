#!/usr/bin/env bash
# Run on the lent H200 after scripts/gpu_run.sh built the cuda preset (same machine, same tree):
# the whole GoogleTest suite under compute-sanitizer, one tool after another (memcheck, racecheck,
# synccheck, initcheck), in parallel shards that share the GPU. Writes each tool's log and a
# summary table (errors and warnings per tool, tests run) to $OUT/sanitizer.md.
#
#   ZS_SANITIZERS="memcheck racecheck"   the tools to run (default: all four)
#   ZS_SANITIZER_SHARDS=8                parallel shards of the suite
#   ZS_SANITIZER_TIMEOUT=240             seconds per tool before it is stopped (reported as such)
#   ZS_RACECHECK_FILTER=...              the GoogleTest filter racecheck runs (default: the suites
#                                        whose kernels share team memory; racecheck is ~50× slower)
#   ZS_SANITIZER_PRINT_LIMIT=20          findings printed per shard (0: all of them, so that the
#                                        kernel counts cover every finding; host frames are dropped
#                                        from the log to keep it small)
#
# memcheck runs with --report-api-errors no: the graph tests provoke CUDA API errors on purpose
# (a fence inside a capture must fail), and their own assertions check those errors.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="${OUT:-/tmp/zs-out}"
mkdir -p "$out"
cd "$repo"
bin=build/cuda/bin/zerosync_tests
[ -x "$bin" ] || { echo "gpu_sanitize: $bin is missing; run scripts/gpu_run.sh first"; exit 1; }
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$sanitizer" ] || { echo "gpu_sanitize: compute-sanitizer not found"; exit 1; }
tools="${ZS_SANITIZERS:-memcheck racecheck synccheck initcheck}"
shards="${ZS_SANITIZER_SHARDS:-8}"
limit="${ZS_SANITIZER_TIMEOUT:-240}"
print_limit="${ZS_SANITIZER_PRINT_LIMIT:-20}"
# Deliberately failing demos and tests that only check host-side parsing are the same under the
# tools; they still run (a sanitizer finding in any of them counts).
summary="$out/sanitizer.md"
echo "| tool | tests run | errors | warnings | status |" > "$summary"
echo "| --- | ---: | ---: | ---: | --- |" >> "$summary"
for tool in $tools; do
  extra=""
  filter="*"
  [ "$tool" = memcheck ] && extra="--report-api-errors no"
  if [ "$tool" = racecheck ]; then
    extra="--racecheck-report all"
    filter="${ZS_RACECHECK_FILTER:-C51Loss.*:C51Q.*:CQL.*:Ensemble.*:IQN.*:IqnKernels.*:GradNorm.*:GradClip.*:DenseBatch.*:SpectralNorm.*:QMonitor.*:Replay.*:SumTree.*:NStep.*:TrainLoopKernels.*:Acting.*:Actor.*:Adam.*:Guard.*:TargetUpdate.*:ToyTerm.*}"
  fi
  t0=$(date +%s)
  for i in $(seq 0 $((shards - 1))); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i OMP_WAIT_POLICY=passive \
      timeout "$limit" "$sanitizer" --tool "$tool" $extra --print-limit "$print_limit" --error-exitcode 99 \
      "$bin" --gtest_filter="$filter" > "$out/san-$tool-$i.raw" 2>&1 &
  done
  wait
  # Straight to a file, not through a pipe: a test process left behind by a stopped sanitizer
  # would hold a pipe open and `wait` with it. Host frames are dropped afterwards. A shard
  # stopped by the time limit names the test it was in: its last RUN without an OK.
  unfinished=""
  for i in $(seq 0 $((shards - 1))); do
    grep -v "Host Frame" "$out/san-$tool-$i.raw" > "$out/san-$tool-$i.log"
    rm -f "$out/san-$tool-$i.raw"
    grep -q "ERROR SUMMARY\|RACECHECK SUMMARY" "$out/san-$tool-$i.log" && continue
    unfinished+=" $(grep -o '^\[ RUN      \] .*' "$out/san-$tool-$i.log" | tail -n1 | sed 's/^\[ RUN      \] //')"
  done
  cat "$out"/san-"$tool"-*.log > "$out/san-$tool.log"
  rm -f "$out"/san-"$tool"-*.log
  ran=$(grep -ho "^\[==========\] [0-9]* tests\? from" "$out/san-$tool.log" | awk '{s += $2} END {print s + 0}')
  errors=$( { grep -ho "ERROR SUMMARY: [0-9]* error" "$out/san-$tool.log" | awk '{print $3}'
              grep -ho "RACECHECK SUMMARY: [0-9]* hazards\? displayed ([0-9]* error" "$out/san-$tool.log" \
                | sed -E 's/.*\(([0-9]*) error/\1/'; } | awk '{s += $1} END {print s + 0}')
  warnings=$(grep -ho "RACECHECK SUMMARY: [0-9]* hazards\? displayed ([0-9]* errors\?, [0-9]* warnings\?)" "$out/san-$tool.log" \
             | sed -E 's/.*, ([0-9]*) warnings?\)/\1/' | awk '{s += $1} END {print s + 0}')
  done_shards=$(grep -c "ERROR SUMMARY\|RACECHECK SUMMARY" "$out/san-$tool.log")
  failed=$(grep -hc "FAILED TEST\|\[  FAILED  \]" "$out/san-$tool.log" | awk '{s += $1} END {print s + 0}')
  status="$done_shards/$shards shards finished in $(( $(date +%s) - t0 )) s; $failed failed-test lines"
  [ -n "$unfinished" ] && status+="; stopped in:$unfinished"
  echo "| $tool | $ran | $errors | $warnings | $status |" >> "$summary"
  # Every finding's kernel (the line after it names the first thread's kernel), counted.
  grep -A1 "^========= \(Invalid\|Error\|Warning\|Uninitialized\|Barrier\|Program hit\)" "$out/san-$tool.log" \
    | grep -o "zs::kernels::[A-Za-z_]*\|zs::[A-Za-z_:]*" | sort | uniq -c | sort -rn > "$out/san-$tool-kernels.txt"
  # Keep the returned logs small: the first findings of each tool.
  grep -B2 -A12 "^========= \(Invalid\|Error\|Race\|Warning\|Uninitialized\|Barrier\|Program hit\)" "$out/san-$tool.log" | head -200 \
    > "$out/san-$tool-findings.txt"
  rm -f "$out/san-$tool.log"
done
cat "$summary"
