#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/): valid files that each
reader accepts, so the fuzzers start from inputs that reach deep into the checks. Needs only
the Python standard library; run it after changing a reader's format. Findings added by hand
(crash-*, finding-*) are left alone."""
import json
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    path = os.path.join(here, "corpus", target, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, raw) in sorted(tensors.items()):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def i32(*v):
    return struct.pack("<%di" % len(v), *v)


small = {"state_dim": 4, "trunk": [8], "head_hidden": 4, "branches": [2, 3], "atoms": 5, "precision": "fp32"}
put("config", "small.json", json.dumps(small))
put("config", "everything.json", json.dumps({
    "state_dim": 48, "trunk": [256, 256], "head_hidden": 128, "branches": [5, 3, 3], "atoms": 51,
    "v_min": -10, "v_max": 10, "gamma": 0.99, "n_step": 3, "lr": 1e-4, "adam_beta1": 0.9,
    "adam_beta2": 0.999, "adam_eps": 1e-8, "max_grad_norm": 10, "tau": 0.005, "spectral_norm": 2.5,
    "seed": 7, "precision": "tf32", "iqn": {"n_tau": 8, "embed_dim": 64, "kappa": 1.0, "budget": 0.1},
    "ensemble": {"k": 2, "budget": 0.1}, "cql": {"alpha": 1.0, "budget": 0.1}}, indent=1))
put("config", "switches.json", json.dumps({"spectral_norm": False, "iqn": True, "ensemble": False, "cql": True}))

put("train_config", "cartpole.json", json.dumps({
    "env": "cartpole", "network": {"trunk": [32], "head_hidden": 16, "atoms": 11, "lr": 0.001},
    "envs": 4, "steps": 1000, "seed": 3, "batch_size": 16, "learning_starts": 100, "train_every": 1,
    "updates": 1, "replay": {"capacity": 2000, "prioritized": True, "alpha": 0.6,
                             "beta": {"start": 0.4, "end": 1, "steps": 0}, "priority_eps": 1e-6},
    "epsilon": {"start": 1, "end": 0.02, "steps": 400},
    "eval": {"every": 400, "episodes": 4, "solve_return": 475, "stop_when_solved": True},
    "checkpoint_every": 400, "guard": {"loss_clip": 1e6, "collapse_multiplier": 0, "warmup_steps": 10}}, indent=1))
put("train_config", "market.json", json.dumps({
    "env": "market", "env_params": {"episode_length": 64, "spread": 0.001},
    "network": {"iqn": {"n_tau": 4}, "cql": True}, "replay": {"alpha": {"start": 0.4, "end": 0.7, "steps": 100}}}))

states = f32(*[0.1 * i for i in range(12)])
batch = {
    "states": ("F32", [3, 4], states),
    "next_states": ("F32", [3, 4], f32(*[-0.1 * i for i in range(12)])),
    "actions": ("I32", [3, 2], i32(0, 2, 1, 0, 1, 1)),
    "rewards": ("F32", [3], f32(1.0, -0.5, 0.0)),
    "dones": ("F32", [3], f32(0.0, 0.0, 1.0)),
    "weights": ("F32", [3], f32(1.0, 0.5, 1.5)),
}
put("batch", "small.safetensors", safetensors(batch))
put("safetensors", "batch.safetensors", safetensors(batch, {"config": json.dumps(small), "steps": "1"}))
put("safetensors", "dtypes.safetensors", safetensors({
    "scalar": ("F64", [], struct.pack("<d", 2.5)),
    "empty": ("F32", [0, 3], b""),
    "half": ("F16", [2], b"\x00\x3c\x00\xc0"),
    "mask": ("BOOL", [3], b"\x01\x00\x01"),
    "counter": ("I64", [1], struct.pack("<q", 1 << 40)),
    "bytes": ("U8", [2, 2], b"\x00\x01\x02\xff"),
}))
