#!/usr/bin/env python3
"""Runs `zerosync step` from two builds on the same inputs and compares every output tensor bit
for bit: the check that a refactoring left the step's arithmetic alone.

For each case (plain step, each auxiliary alone, all of them, spectral norm, odd sizes) it writes
a config and a random batch, runs both programs for a few steps, and compares the output files
tensor by tensor (by name, dtype, shape and bytes). A tensor whose metadata names its fields
(`guard` with `guard_fields`) is compared field by field by name, each field's bytes. A tensor
or field present in one output only is reported; `--allow-missing NAME` (`guard.reserved` for a
field) accepts a known format change. The loss's double-DQN argmax a*
is the one place where two correct programs may differ (near-ties of Q); `--explain-ties` prints,
for a case that differs, the samples and branches whose a* changed.

  python3 tools/compare_step.py --old /tmp/old/zerosync --new build/openmp/bin/zerosync

With --ranks N the new program runs as N ranks (`--mpirun`, default "mpirun", then -n N), each
on its share of the batch, and --rtol R compares float tensors within a relative tolerance
instead of bit for bit (max |old - new| <= R * max |old| per tensor or guard field): a run of N
ranks averages N batch means, one process takes one mean over the whole batch, and the two round
differently. Cases whose batch does not split evenly into N are skipped.

  python3 tools/compare_step.py --old build/openmp/bin/zerosync --new build/openmp/bin/zerosync \
      --ranks 2 --mpirun "mpirun --oversubscribe" --rtol 1e-5 --adam-slack 0.02

--adam-slack F lets the parameters (param.* and target.*) differ by F·lr a step more: Adam moves
an element whose gradient is near zero by m/√v of lr, a ratio of two tiny numbers that the
gradient's rounding changes, so two correct reductions of one gradient can move such an element
by different fractions of lr (2026-12-06, this host: 9.0e-7 after 3 steps at lr 1e-4, 1.4e-5 of
the tensor's largest value). The gradients themselves stay within --rtol.

Needs only the Python standard library. Exit status 0 when every compared tensor is identical
(within the tolerance, with --rtol).
"""
import argparse
import json
import os
import random
import shlex
import struct
import subprocess
import sys
import tempfile

DTYPES = {"F32": ("f", 4), "F64": ("d", 8), "I32": ("i", 4), "I64": ("q", 8)}


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, flat list)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, values) in tensors.items():
        fmt, size = DTYPES[dtype]
        blob = struct.pack("<%d%s" % (len(values), fmt), *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes); metadata under '__metadata__' is returned apart."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], data[base + a:base + b])
    return out, meta


def values(t):
    dtype, _, raw = t
    fmt, size = DTYPES[dtype]
    return struct.unpack("<%d%s" % (len(raw) // size, fmt), raw)


def random_batch(rng, cfg, B):
    S, branches = cfg.get("state_dim", 48), cfg.get("branches", [5, 3, 3])
    return {
        "states": ("F32", [B, S], [rng.gauss(0, 1) for _ in range(B * S)]),
        "next_states": ("F32", [B, S], [rng.gauss(0, 1) for _ in range(B * S)]),
        "actions": ("I32", [B, len(branches)], [rng.randrange(n) for _ in range(B) for n in branches]),
        "rewards": ("F32", [B], [2 * rng.gauss(0, 1) for _ in range(B)]),
        "dones": ("F32", [B], [1.0 if rng.random() < 0.2 else 0.0 for _ in range(B)]),
        "weights": ("F32", [B], [0.5 + rng.random() for _ in range(B)]),
    }


CASES = [
    ("plain", {"precision": "fp32"}, 64, 3),
    ("plain-tf32", {}, 256, 2),
    ("iqn", {"precision": "fp32", "iqn": {"n_tau": 4, "embed_dim": 16}}, 32, 2),
    ("ensemble", {"precision": "fp32", "ensemble": {"k": 2}}, 32, 2),
    ("cql", {"precision": "fp32", "cql": {"alpha": 0.5}}, 32, 2),
    ("all-aux", {"precision": "fp32", "iqn": True, "ensemble": {"k": 3, "budget": 0.05}, "cql": True}, 48, 3),
    ("spectral", {"precision": "fp32", "spectral_norm": 1.0}, 32, 2),
    ("odd-sizes", {"precision": "fp32", "state_dim": 7, "trunk": [33, 17, 9], "head_hidden": 13,
                   "branches": [2, 7], "atoms": 11, "v_min": -3.0, "v_max": 5.0, "n_step": 1,
                   "max_grad_norm": 0.01}, 19, 4),
]


def run(binary, work, tag, steps, launcher=()):
    out = os.path.join(work, "out-%s.safetensors" % tag)
    subprocess.run(list(launcher) + [binary, "step", "--config", os.path.join(work, "config.json"), "--batch",
                                     os.path.join(work, "batch.safetensors"), "--steps", str(steps), "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    return read_safetensors(out)


# Config::lr's default (src/core/config.hpp), for cases that do not set lr.
DEFAULT_LR = 1e-4


def same(a, b, dtype, rtol, atol=0.0):
    """Equal bytes; or, with rtol, float values within rtol of the larger magnitude in a, plus atol."""
    if a == b:
        return True
    if rtol is None or dtype not in ("F32", "F64"):
        return False
    fmt, size = DTYPES[dtype]
    x = struct.unpack("<%d%s" % (len(a) // size, fmt), a)
    y = struct.unpack("<%d%s" % (len(b) // size, fmt), b)
    if len(x) != len(y):
        return False
    scale = max((abs(v) for v in x), default=0.0)
    worst = max((abs(u - v) for u, v in zip(x, y)), default=0.0)
    return worst == worst and worst <= rtol * scale + atol


def fields(t, meta, name):
    """name.field -> bytes of one element, for a tensor whose metadata lists its fields."""
    names = [f.strip() for f in meta.get(name + "_fields", "").split(",") if f.strip()]
    _, size = DTYPES[t[0]]
    if len(names) * size != len(t[2]):
        return None
    return {"%s.%s" % (name, f): t[2][i * size:(i + 1) * size] for i, f in enumerate(names)}


def explain_ties(old, new):
    # The outputs hold no a*; the priorities of the samples whose a* changed differ.
    a, b = values(old["priorities"]), values(new["priorities"])
    return [i for i in range(len(a)) if struct.pack("<f", a[i]) != struct.pack("<f", b[i])]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--old", required=True, help="zerosync program before the change")
    p.add_argument("--new", required=True, help="zerosync program after the change")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--allow-missing", action="append", default=[],
                   help="a tensor name that may exist in one output only (a deliberate format change)")
    p.add_argument("--explain-ties", action="store_true")
    p.add_argument("--ranks", type=int, default=1, help="run the new program as this many MPI ranks")
    p.add_argument("--mpirun", default="mpirun", help="the MPI launcher and its options (with --ranks)")
    p.add_argument("--rtol", type=float, default=None, help="compare floats within this relative tolerance")
    p.add_argument("--adam-slack", type=float, default=0.0,
                   help="with --rtol: parameters (param.*, target.*) may differ by this many lr a step more")
    args = p.parse_args()
    launcher = shlex.split(args.mpirun) + ["-n", str(args.ranks)] if args.ranks > 1 else []
    rng = random.Random(args.seed)
    failures = 0
    if args.rtol is not None and args.adam_slack:
        print("compare_step: parameters (param.*, target.*) within rtol %g plus %g·lr a step" % (
            args.rtol, args.adam_slack))
    for name, cfg, B, steps in CASES:
        with tempfile.TemporaryDirectory() as work:
            cfg = dict(cfg, seed=rng.randrange(1 << 31))
            with open(os.path.join(work, "config.json"), "w") as f:
                json.dump(cfg, f)
            write_safetensors(os.path.join(work, "batch.safetensors"), random_batch(rng, cfg, B))
            if B % args.ranks:
                print("%-10s B=%-3d: skipped (does not split into %d ranks)" % (name, B, args.ranks))
                continue
            slack = args.adam_slack * cfg.get("lr", DEFAULT_LR) * steps
            old, old_meta = run(args.old, work, "old", steps)
            new, new_meta = run(args.new, work, "new", steps, launcher)
            differ, only, agree = [], [], 0
            for t in sorted(set(old) | set(new)):
                if t not in old or t not in new:
                    if t not in args.allow_missing:
                        only.append(t + (" (old only)" if t in old else " (new only)"))
                    continue
                fo, fn = fields(old[t], old_meta, t), fields(new[t], new_meta, t)
                before = len(differ) + len(only)
                if fo is not None and fn is not None:
                    for f in sorted(set(fo) | set(fn)):
                        if f not in fo or f not in fn:
                            if f not in args.allow_missing:
                                only.append(f + (" (old only)" if f in fo else " (new only)"))
                        elif not same(fo[f], fn[f], old[t][0], args.rtol):
                            differ.append(f)
                elif old[t][:2] != new[t][:2] or not same(old[t][2], new[t][2], old[t][0], args.rtol,
                                                           slack if t.startswith(("param.", "target.")) else 0.0):
                    differ.append(t)
                agree += len(differ) + len(only) == before
            word = "identical" if args.rtol is None else "within rtol %g" % args.rtol
            status = word if not differ and not only else "DIFFERENT"
            print("%-10s B=%-3d steps=%d: %d tensors %s, %d differ%s — %s" % (
                name, B, steps, agree, word, len(differ), (", %d in one output only" % len(only)) if only else "",
                status))
            for t in differ[:20]:
                print("    differs:", t)
            for t in only:
                print("    only in one:", t)
            if differ and args.explain_ties and "priorities" in old and "priorities" in new:
                print("    samples whose priority changed:", explain_ties(old, new))
            failures += bool(differ or only)
    word = "all identical" if args.rtol is None else "all within rtol %g" % args.rtol
    print("compare_step: %s" % (word if failures == 0 else "%d case(s) differ" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
