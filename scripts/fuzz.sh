#!/usr/bin/env bash
# Fuzzes zerosync's file readers: builds the libFuzzer targets of fuzz/ with clang (ASan and
# UBSan on), then runs each for a bounded time from its seed corpus (fuzz/corpus/<target>/).
# Exits non-zero when a target crashes, printing the input and how to replay it.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]        default 20; four targets
#
# New inputs that reach new code are kept in build/fuzz/work/<target>/ (not in the repository),
# so repeated local runs go deeper; crashing inputs land in build/fuzz/findings/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

seconds="${1:-20}"
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "zerosync fuzz: error: seconds per target is '$seconds'; expected a positive integer" >&2
  exit 2
fi

bash "$repo/cmake/bootstrap.sh" ${ZEROSYNC_NO_APT:+--no-apt} fuzz
build="$repo/build/fuzz"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$repo/fuzz" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" > /dev/null
cmake --build "$build" -j "$jobs"

status=0
for target in config train_config safetensors batch; do
  case "$target" in
    config|train_config) dict="$repo/fuzz/json.dict" ;;
    *) dict="$repo/fuzz/safetensors.dict" ;;
  esac
  work="$build/work/$target"
  mkdir -p "$work" "$build/findings"
  log="$build/$target.log"
  # -timeout: an input that takes seconds is a hang; -rss_limit_mb: one that takes gigabytes is
  # a finding too (the readers' sizes come from the file, and the file is small).
  if UBSAN_OPTIONS=print_stacktrace=1 "$build/fuzz_$target" -max_total_time="$seconds" -timeout=10 \
       -rss_limit_mb=2048 -dict="$dict" -artifact_prefix="$build/findings/$target-" \
       "$work" "$repo/fuzz/corpus/$target" > "$log" 2>&1; then
    echo "zerosync fuzz: $target: ok ($(grep -o 'Done [0-9]* runs' "$log" | tail -1 | cut -d' ' -f2) inputs in ${seconds} s)"
  else
    status=1
    input=$(grep -o "Test unit written to .*" "$log" | tail -1 | sed 's/Test unit written to //')
    tail -n 60 "$log"
    echo "zerosync fuzz: $target: FAILED (log: $log)"
    if [ -n "$input" ]; then
      echo "  input:  $input"
      echo "  replay: $build/fuzz_$target $input"
      echo "  once fixed, keep it: cp $input $repo/fuzz/corpus/$target/crash-<what> (the test suite replays the corpus)"
    fi
  fi
done
exit "$status"
