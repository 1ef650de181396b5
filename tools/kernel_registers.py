#!/usr/bin/env python3
"""Registers and spills of the fused step's kernels, from ptxas, without a GPU.

Usage: kernel_registers.py [BUILD_DIR] [SOURCE]   (defaults: build/cuda, src/nn/fused_kernel.cpp)

With SOURCE perf/fused_mlp_bench.cpp (or any file that instantiates kernels::RowBlockMlp) it prints
the row-block kernels instead: rows, warps, k-steps in flight, column group, W's layout ([k, n]:
the input-gradient chain's transposed read), registers, spills.

Recompiles SOURCE alone with the command in BUILD_DIR/compile_commands.json plus -Xptxas=-v (into a
temporary object; the build is untouched) and prints one row per kernel of FusedProgram phases: the
tile kinds it is compiled for (kernels::kind_bit mask), the product tile (rows × cols, stages), whether
it is the persistent launch, its registers and its spills. A product kernel of 32-row tiles must fit
four 128-thread teams a multiprocessor (128 registers; launch bounds hold it there and spill the
rest): a spill row there is code that costs the chunk loop local-memory traffic (docs/kernels.md).
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def main() -> int:
    build = sys.argv[1] if len(sys.argv) > 1 else "build/cuda"
    source = sys.argv[2] if len(sys.argv) > 2 else "src/nn/fused_kernel.cpp"
    db = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db):
        print(f"kernel_registers: no {db}; configure the cuda preset first (cmake --preset cuda)", file=sys.stderr)
        return 2
    entries = [e for e in json.load(open(db)) if e["file"].endswith(source)]
    if not entries:
        print(f"kernel_registers: {source} is not in {db}", file=sys.stderr)
        return 2
    e = entries[0]
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "k.o")
        cmd = re.sub(r"\s-o\s+\S+", f" -o {obj}", e["command"]) + " -Xptxas=-v"
        run = subprocess.run(cmd, shell=True, cwd=e["directory"], capture_output=True, text=True)
    log = run.stdout + run.stderr
    if run.returncode != 0:
        print(log[-4000:], file=sys.stderr)
        print(f"kernel_registers: compiling {source} failed (exit {run.returncode})", file=sys.stderr)
        return 1
    rows, blocks, fn, spill = [], [], None, ""
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            fn, spill = m.group(1), ""
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and fn:
            spill = "" if m.group(1) == "0" and m.group(2) == "0" else f"{m.group(1)} B stored, {m.group(2)} B loaded"
        m = re.search(r"Used (\d+) registers", line)
        if m and fn:
            k = re.search(r"PhaseOfKindsILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E", fn)
            if k:
                kinds, r, c, st = k.groups()
                # Kernels of no product (kind bit 0) are compiled with the default tile arguments.
                tile = f"{r} × {c}, {st}" if int(kinds) & 1 else "—"
                rows.append((int(kinds), tile, "EveryPhase" in fn, int(m.group(1)), spill))
            k = re.search(r"RowBlockMlpI\w*?CudaELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELb([01])E", fn)
            if k:
                blocks.append(tuple(int(v) for v in k.groups()) + (int(m.group(1)), spill))
            fn = None
    if blocks:
        print("| rows | warps | steps in flight | column group | W | registers | spills |")
        print("| ---: | ---: | ---: | ---: | --- | ---: | --- |")
        for r, w, d, g, t, regs, spills in sorted(set(blocks)):
            print(f"| {r} | {w} | {d} | {g} | {'[k, n]' if t else '[n, k]'} | {regs} | {spills or '—'} |")
        if not rows:
            return 0
    if not rows:
        print("kernel_registers: ptxas named no FusedProgram kernel", file=sys.stderr)
        return 1
    print("| kinds | tile, stages | persistent | registers | spills |")
    print("| ---: | --- | --- | ---: | --- |")
    for kinds, tile, persistent, regs, spills in sorted(set(rows)):
        print(f"| {kinds} | {tile} | {'yes' if persistent else ''} | {regs} | {spills or '—'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
