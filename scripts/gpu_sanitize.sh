#!/usr/bin/env bash
# Run on the lent H200 after scripts/gpu_run.sh built the cuda preset (same machine, same tree):
# the GoogleTest suite under compute-sanitizer, one tool after another (memcheck, racecheck,
# synccheck, initcheck). Every test runs in its own sanitizer process, ZS_SANITIZER_JOBS at a
# time from one queue: the quick tests never wait behind a long one, and a test that runs out
# of time names only itself. Writes a summary table (tests, errors, warnings, tests stopped by
# the time limits, per tool) to $OUT/sanitizer.md and each tool's first findings beside it.
#
#   ZS_SANITIZERS="memcheck racecheck"   the tools to run (default: all four)
#   ZS_SANITIZER_JOBS=16                 tests under a sanitizer at once (default 16: the lent
#                                        machine's cores)
#   ZS_SANITIZER_TIMEOUT=240             seconds per tool before the rest of its queue is stopped
#   ZS_SANITIZER_TEST_TIMEOUT=150        seconds one test may take under a tool
#   ZS_SANITIZER_FILTER=...              the GoogleTest filter every tool runs (default: all)
#   ZS_RACECHECK_FILTER=...              racecheck's filter, when it should differ
#   ZS_SANITIZER_PRINT_LIMIT=0           findings printed per test (0: all of them)
#
# memcheck runs with --report-api-errors no: the graph tests provoke CUDA API errors on purpose
# (a fence inside a capture must fail), and their own assertions check those errors.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="${OUT:-/tmp/zs-out}"
mkdir -p "$out"
cd "$repo"
bin="$repo/build/cuda/bin/zerosync_tests"
[ -x "$bin" ] || { echo "gpu_sanitize: $bin is missing; run scripts/gpu_run.sh first"; exit 1; }
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$sanitizer" ] || { echo "gpu_sanitize: compute-sanitizer not found"; exit 1; }
tools="${ZS_SANITIZERS:-memcheck racecheck synccheck initcheck}"
jobs="${ZS_SANITIZER_JOBS:-16}"
limit="${ZS_SANITIZER_TIMEOUT:-240}"
test_limit="${ZS_SANITIZER_TEST_TIMEOUT:-150}"
print_limit="${ZS_SANITIZER_PRINT_LIMIT:-0}"
summary="$out/sanitizer.md"
echo "| tool | tests run | errors | warnings | failed tests | stopped (test limit ${test_limit} s, tool limit ${limit} s) |" > "$summary"
echo "| --- | ---: | ---: | ---: | ---: | --- |" >> "$summary"
for tool in $tools; do
  extra=""
  filter="${ZS_SANITIZER_FILTER:-*}"
  [ "$tool" = memcheck ] && extra="--report-api-errors no"
  if [ "$tool" = racecheck ]; then
    extra="--racecheck-report all"
    filter="${ZS_RACECHECK_FILTER:-$filter}"
  fi
  logs=$(mktemp -d)
  # Suite.Test names, in the suite's order.
  "$bin" --gtest_list_tests --gtest_filter="$filter" \
    | awk '/^[^ ]/ {suite = $1} /^  [^ ]/ {print suite $1}' > "$logs/tests.txt"
  t0=$(date +%s)
  # One sanitizer process per test; each writes straight to its own file (a test left behind by
  # a stopped sanitizer must not hold a pipe open). The whole queue stops at the tool's limit.
  export sanitizer tool extra print_limit bin logs test_limit
  timeout "$limit" xargs -P "$jobs" -I{} bash -c \
    'OMP_WAIT_POLICY=passive timeout "$test_limit" "$sanitizer" --tool "$tool" $extra --print-limit "$print_limit" \
       --error-exitcode 99 "$bin" --gtest_filter="$1" > "$logs/${1//\//_}.log" 2>&1' _ {} \
    < "$logs/tests.txt"
  seconds=$(( $(date +%s) - t0 ))
  # A test is finished when its sanitizer printed its summary; otherwise it was stopped (by the
  # test limit, or never started or cut off by the tool's limit).
  finished=0 failed=0 errors=0 warnings=0 stopped=""
  while read -r t; do
    f="$logs/${t//\//_}.log"
    if [ -f "$f" ] && grep -q "ERROR SUMMARY\|RACECHECK SUMMARY" "$f"; then
      finished=$((finished + 1))
      grep -q "^\[  FAILED  \]" "$f" && failed=$((failed + 1))
      e=$( { grep -ho "ERROR SUMMARY: [0-9]* error" "$f" | awk '{print $3}'
             grep -ho "RACECHECK SUMMARY: [0-9]* hazards\? displayed ([0-9]* error" "$f" | sed -E 's/.*\(([0-9]*) error/\1/'; } \
           | awk '{s += $1} END {print s + 0}')
      w=$(grep -ho "RACECHECK SUMMARY: [0-9]* hazards\? displayed ([0-9]* errors\?, [0-9]* warnings\?)" "$f" \
          | sed -E 's/.*, ([0-9]*) warnings?\)/\1/' | awk '{s += $1} END {print s + 0}')
      errors=$((errors + e)) warnings=$((warnings + w))
    else
      stopped+=" $t"
    fi
  done < "$logs/tests.txt"
  total=$(wc -l < "$logs/tests.txt")
  echo "| $tool | $finished of $total in $seconds s | $errors | $warnings | $failed | ${stopped:-none} |" >> "$summary"
  # Every finding's kernel (the line after it names the first thread's kernel), counted, and the
  # first findings in full, host frames dropped.
  cat "$logs"/*.log | grep -v "Host Frame" > "$logs/all.txt"
  grep -A1 "^========= \(Invalid\|Error\|Warning\|Uninitialized\|Barrier\|Program hit\)" "$logs/all.txt" \
    | grep -o "zs::kernels::[A-Za-z_]*\|zs::[A-Za-z_:]*" | sort | uniq -c | sort -rn > "$out/san-$tool-kernels.txt"
  grep -B2 -A12 "^========= \(Invalid\|Error\|Race\|Warning\|Uninitialized\|Barrier\|Program hit\)" "$logs/all.txt" | head -200 \
    > "$out/san-$tool-findings.txt"
  grep -h "^\[  FAILED  \]" "$logs"/*.log | sort -u > "$out/san-$tool-failed.txt"
  [ -s "$out/san-$tool-failed.txt" ] || rm -f "$out/san-$tool-failed.txt"
  rm -rf "$logs"
done
cat "$summary"
