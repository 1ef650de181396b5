#!/usr/bin/env python3
"""Kernel-by-kernel table of one profiled step from `ncu --csv` output (scripts/gpu_run.sh,
ZS_NCU_FILTER): each kernel's short name, grid, block and duration, and their sum. The sum is
the step's kernel time alone; the graph's µs/step minus it is what the gaps between nodes cost."""
import csv
import re
import sys


def short_name(name: str) -> str:
    # A Kokkos lambda's kernel is named after the function that wrote it (&zs::f); a functor's
    # after its type (zs::F<...>), a wrapped one's after what it wraps (zs::AfterPriorGrids<zs::F>
    # is F); a library kernel keeps its own name.
    name = re.sub(r"zs::AfterPriorGrids<", "", name)
    for pattern in (r"&(zs::[\w:]+)", r"(zs::[\w:]+)"):
        m = re.search(pattern, name)
        if m:
            return m.group(1).replace("(anonymous namespace)::", "")
    return name.split("(")[0][:70]


def main(path: str, label: str) -> None:
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = [r for r in csv.DictReader(lines) if r.get("Metric Name") == "gpu__time_duration.sum"]
    total = 0.0
    print(f"## {label}: {len(rows)} kernels")
    print("| # | kernel | grid | block | µs |")
    print("| ---: | --- | --- | --- | ---: |")
    for i, r in enumerate(rows):
        value = float(r["Metric Value"].replace(",", ""))
        us = value / 1e3 if r["Metric Unit"] in ("ns", "nsecond") else value
        total += us
        print(f"| {i} | {short_name(r['Kernel Name'])} | {r['Grid Size']} | {r['Block Size']} | {us:.1f} |")
    print(f"\nsum of kernel durations: {total:.1f} µs\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.argv[1])
