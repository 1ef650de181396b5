#!/usr/bin/env bash
# Side by side on one machine: benchmark binaries of two or more commits, run in turns so that a
# drifting clock or a warming card touches each of them alike. Runs on different lent machines
# differ by a few per cent, so "is commit B slower than A" needs this, not two separate runs.
#
#   scripts/gpu_ab.sh LABEL=BINARY...   e.g. base=.carry/ab/bench_e034857 now=.carry/ab/bench_main
#
# The binaries may be built here (cuda preset) and carried: the GPU machine supplies CUDA's
# libraries and NCCL (its Python nvidia-nccl package), the carried .debs Google Benchmark.
#   ZS_AB_FILTER    benchmark filter (default: the graph step at B = 256 and at 4096 / 512 / 256,
#                   and with every auxiliary)
#   ZS_AB_ROUNDS    turns (default 3)
#   ZS_AB_MIN_TIME  seconds per benchmark per turn (default 0.3)
# Writes $OUT/ab.json (every turn's µs per call) and prints, per benchmark, each binary's median
# and its change against the first binary's.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ $# -ge 2 ] || { sed -n '2,15p' "${BASH_SOURCE[0]}"; exit 2; }
out="${OUT:-/tmp/zs-out}"
mkdir -p "$out"
cd "$repo"
filter="${ZS_AB_FILTER:-^BM_Step/B:256/width:256/heads:128/graph:1/|^BM_Step/B:4096/width:512/heads:256/graph:1/|^BM_StepAux/7/}"
rounds="${ZS_AB_ROUNDS:-3}"
min_time="${ZS_AB_MIN_TIME:-0.3}"

sysroot=/tmp/zs-sysroot
for deb in .carry/debs/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" "$sysroot"; done
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$sysroot/usr/lib/x86_64-linux-gnu${nccl_lib:+:$nccl_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

labels=()
for arg in "$@"; do
  label="${arg%%=*}" bin="${arg#*=}"
  [ -x "$bin" ] || { echo "gpu_ab: '$bin' (for '$label') is not an executable"; exit 2; }
  if ldd "$bin" | grep -q "not found"; then echo "gpu_ab: $label lacks libraries:"; ldd "$bin" | grep "not found"; exit 1; fi
  labels+=("$label")
done
work=$(mktemp -d)
for r in $(seq 1 "$rounds"); do
  for arg in "$@"; do
    label="${arg%%=*}" bin="${arg#*=}"
    "$bin" --benchmark_filter="$filter" --benchmark_min_time="$min_time" \
      --benchmark_out="$work/$label-$r.json" --benchmark_out_format=json > "$work/$label-$r.log" 2>&1 \
      || { echo "gpu_ab: $label failed in turn $r:"; tail -20 "$work/$label-$r.log"; exit 1; }
  done
done
python3 - "$work" "$out/ab.json" "$rounds" "${labels[@]}" <<'EOF'
import json, statistics, sys
work, dest, rounds, labels = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
runs = {}  # benchmark -> label -> [µs per call, one per turn]
for label in labels:
    for r in range(1, rounds + 1):
        for b in json.load(open(f"{work}/{label}-{r}.json"))["benchmarks"]:
            if "us_per_call" in b:
                runs.setdefault(b["name"], {}).setdefault(label, []).append(b["us_per_call"])
json.dump(runs, open(dest, "w"), indent=1)
print("| benchmark | " + " | ".join(f"{l} (median, µs)" for l in labels) + " | " +
      " | ".join(f"{l} vs {labels[0]}" for l in labels[1:]) + " |")
print("| --- |" + " ---: |" * (2 * len(labels) - 1))
for name, by in runs.items():
    med = {l: statistics.median(v) for l, v in by.items()}
    spread = {l: f"{min(v):.1f}–{max(v):.1f}" for l, v in by.items()}
    cells = [f"{med[l]:.1f} ({spread[l]})" if l in med else "—" for l in labels]
    change = [f"{100 * (med[l] / med[labels[0]] - 1):+.1f} %" if l in med and labels[0] in med else "—"
              for l in labels[1:]]
    print(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(change) + " |")
EOF
