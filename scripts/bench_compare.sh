#!/usr/bin/env bash
# Compares a benchmark run against a committed baseline with Google Benchmark's own tool
# (Debian's libbenchmark-tools: /usr/share/benchmark/compare.py) and prints each benchmark's
# time before and after and the relative change (negative: faster).
#
#   scripts/bench_compare.sh BASELINE.json NEW.json [FILTER]
#
# BASELINE: perf/baselines/<machine>.json (h200.json) or a run made beside NEW; NEW: a run's
# --benchmark_out file. Benchmarks present in both are compared; FILTER (a regex, default
# ^BM_Step) keeps those whose name matches.
# ZS_SYSROOT: where a carried libbenchmark-tools was unpacked (the GPU machine), if not in /.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,10p' "${BASH_SOURCE[0]}"; exit 2; }
base="$1" new="$2" filter="${3:-^BM_Step}"
for f in "$base" "$new"; do
  [ -f "$f" ] || { echo "bench_compare: no file '$f'; expected a Google Benchmark JSON output" >&2; exit 2; }
done
tool=""
for root in "${ZS_SYSROOT:-}" ""; do
  [ -f "$root/usr/share/benchmark/compare.py" ] && { tool="$root/usr/share/benchmark/compare.py"; break; }
done
[ -n "$tool" ] || { echo "bench_compare: compare.py not found; install Debian's libbenchmark-tools (cmake/bootstrap.sh does)" >&2; exit 2; }
# compare.py needs numpy and scipy: Debian's python3 has them from python3-scipy.
py=""
for cand in /usr/bin/python3 python3; do
  if command -v "$cand" > /dev/null && "$cand" -c 'import numpy, scipy' 2> /dev/null; then py="$cand"; break; fi
done
[ -n "$py" ] || { echo "bench_compare: no python3 with numpy and scipy; install python3-scipy" >&2; exit 2; }
# compare.py has no name filter of its own in 'benchmarks' mode: compare filtered copies.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for side in base new; do
  "$py" - "${!side}" "$filter" "$work/$side.json" <<'PY'
import json, re, sys
src, pattern, dst = sys.argv[1:4]
d = json.load(open(src))
d["benchmarks"] = [b for b in d["benchmarks"] if re.search(pattern, b["name"])]
json.dump(d, open(dst, "w"))
PY
done
"$py" "$tool" --no-color benchmarks "$work/base.json" "$work/new.json" 2>&1 | grep -v "^Comparing"
