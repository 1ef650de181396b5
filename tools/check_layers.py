#!/usr/bin/env python3
"""Checks the source tree's layering: every file under src/<layer>/ includes only headers of its
own layer or the layers below it, and no file name appears twice in src/ (except the per-backend
implementations of one interface: backends/cuda/X and backends/host/X).

Layers, bottom to top: core, backends, kernels, nn, losses, train, rl, app.

  python3 tools/check_layers.py [SRC_DIR]     exit 0 when the tree keeps both rules
"""
import os
import re
import sys

LAYERS = ["core", "backends", "kernels", "nn", "losses", "train", "rl", "app"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    src = os.path.normpath(src)
    problems, seen = [], {}
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".hpp", ".cpp", ".h")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            layer = rel.split(os.sep)[0]
            if layer not in LAYERS:
                problems.append("%s: not in a layer folder (expected one of %s)" % (rel, ", ".join(LAYERS)))
                continue
            twins = {seen.get(name, ""), rel} == {os.path.join("backends", "cuda", name), os.path.join("backends", "host", name)}
            if name in seen and not twins:
                problems.append("%s: the name %s is also %s" % (rel, name, seen[name]))
            seen[name] = rel
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1).split("/")[0]
                    if target not in LAYERS:
                        problems.append("%s:%d: includes \"%s\", which is in no layer" % (rel, number, m.group(1)))
                    elif LAYERS.index(target) > LAYERS.index(layer):
                        problems.append("%s:%d: %s includes \"%s\" from %s, a layer above it" %
                                        (rel, number, layer, m.group(1), target))
    for p in problems:
        print(p)
    print("check_layers: %d files, %s" % (len(seen), "layering kept" if not problems else "%d problem(s)" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
