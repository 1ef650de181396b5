#!/usr/bin/env python3
"""Checks `zerosync step` against an independent PyTorch implementation (float64, autograd).

Writes a config, PyTorch-initialised parameters and a random batch, runs `zerosync step`, and
compares loss, priorities, every gradient, and the parameters and target after K steps of
torch.optim.Adam + clipping + Polyak averaging. Exits non-zero when any error exceeds its
tolerance. Needs torch and safetensors (the H200 machine has both).

  python3 tools/torch_check.py --zerosync build/cuda/bin/zerosync --precision fp32 --steps 3
"""
import argparse, json, os, subprocess, sys, tempfile

import torch
from safetensors.torch import load_file, save_file

p = argparse.ArgumentParser()
p.add_argument("--zerosync", required=True)
p.add_argument("--precision", default="fp32", choices=["fp32", "tf32"])
p.add_argument("--steps", type=int, default=3)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--max-grad-norm", type=float, default=0.5)
p.add_argument("--seed", type=int, default=1234)
p.add_argument("--all-done", action="store_true",
               help="terminal transitions only: the target no longer depends on the double-DQN argmax, whose "
                    "near-ties TF32 rounding can flip (a discontinuity, not an error)")
args = p.parse_args()

torch.manual_seed(args.seed)
cfg = dict(state_dim=48, trunk=[256, 256], head_hidden=128, branches=[5, 3, 3], atoms=51, v_min=-10.0,
           v_max=10.0, gamma=0.99, n_step=3, lr=1e-3, adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-8,
           max_grad_norm=args.max_grad_norm, tau=0.005, spectral_norm=False, seed=7, precision=args.precision)
B, S, K, J = args.batch, cfg["state_dim"], len(cfg["branches"]), cfg["atoms"]
H = cfg["head_hidden"]


def make_net():
    layers = {}
    w = S
    for i, width in enumerate(cfg["trunk"]):
        layers[f"trunk.{i}"] = torch.nn.Linear(w, width)
        w = width
    layers["value.0"] = torch.nn.Linear(w, H)
    layers["value.1"] = torch.nn.Linear(H, J)
    for k, n in enumerate(cfg["branches"]):
        layers[f"branch.{k}.0"] = torch.nn.Linear(w, H)
        layers[f"branch.{k}.1"] = torch.nn.Linear(H, n * J)
    return {name: {"weight": l.weight.detach().double().clone(), "bias": l.bias.detach().double().clone()}
            for name, l in layers.items()}


online, target = make_net(), make_net()
for name in target:  # a target that differs from online, so the test sees which one is used
    pass

z = torch.linspace(cfg["v_min"], cfg["v_max"], J, dtype=torch.float64)


def forward(P, x):
    h = x
    for i in range(len(cfg["trunk"])):
        h = torch.relu(h @ P[f"trunk.{i}"]["weight"].T + P[f"trunk.{i}"]["bias"])
    v = torch.relu(h @ P["value.0"]["weight"].T + P["value.0"]["bias"]) @ P["value.1"]["weight"].T + P["value.1"]["bias"]
    out = []
    for k, n in enumerate(cfg["branches"]):
        b = torch.relu(h @ P[f"branch.{k}.0"]["weight"].T + P[f"branch.{k}.0"]["bias"])
        o = (b @ P[f"branch.{k}.1"]["weight"].T + P[f"branch.{k}.1"]["bias"]).view(-1, n, J)
        q = v[:, None, :] + o - o.mean(dim=1, keepdim=True)
        out.append(torch.log_softmax(q, dim=2))
    return out  # per branch [rows, n, J]


def loss_fn(P, T, batch):
    s, s2, a, r, d, w = batch
    lp, lp2, lt = forward(P, s), forward(P, s2), forward(T, s2)
    gn = cfg["gamma"] ** cfg["n_step"]
    dz = (cfg["v_max"] - cfg["v_min"]) / (J - 1)
    L = torch.zeros(B, dtype=torch.float64)
    for k in range(K):
        with torch.no_grad():
            q2 = (lp2[k].exp() * z).sum(2)
            astar = q2.argmax(1)  # first maximal index on ties
            pt = lt[k][torch.arange(B), astar].exp()
            tz = (r[:, None] + gn * (1 - d[:, None]) * z[None, :]).clamp(cfg["v_min"], cfg["v_max"])
            bpos = (tz - cfg["v_min"]) / dz
            lo, hi = bpos.floor().long(), bpos.ceil().long()
            m = torch.zeros(B, J, dtype=torch.float64)
            same = lo == hi
            m.scatter_add_(1, lo, torch.where(same, pt, pt * (hi.double() - bpos)))
            m.scatter_add_(1, hi, torch.where(same, torch.zeros_like(pt), pt * (bpos - lo.double())))
        L = L + (-(m * lp[k][torch.arange(B), a[:, k]]).sum(1)) / K
    return (w * L).mean(), L


batch = (torch.randn(B, S, dtype=torch.float64).float().double(), torch.randn(B, S).double(),
         torch.stack([torch.randint(0, n, (B,)) for n in cfg["branches"]], 1),
         (2 * torch.randn(B)).double(), torch.ones(B).double() if args.all_done else (torch.rand(B) < 0.2).double(),
         (0.5 + torch.rand(B)).double())
batch = tuple(x.float().double() if x.dtype == torch.float64 else x for x in batch)
# fp32-exact copies of the parameters, so both sides start from the same numbers
for P in (online, target):
    for l in P.values():
        for key in l:
            l[key] = l[key].float().double()

work = tempfile.mkdtemp(prefix="zs_torch_check_")
paths = {n: os.path.join(work, n) for n in ("config.json", "batch.safetensors", "params.safetensors", "out.safetensors")}
json.dump(cfg, open(paths["config.json"], "w"))
s, s2, a, r, d, w = batch
save_file({"states": s.float(), "next_states": s2.float(), "actions": a.int(), "rewards": r.float(),
           "dones": d.float(), "weights": w.float()}, paths["batch.safetensors"])
params = {}
for name, l in online.items():
    for key, t in l.items():
        params[f"{name}.{key}"] = t.float().contiguous()
        params[f"target.{name}.{key}"] = target[name][key].float().contiguous()
save_file(params, paths["params.safetensors"])
cmd = [args.zerosync, "step", "--config", paths["config.json"], "--batch", paths["batch.safetensors"], "--params",
       paths["params.safetensors"], "--steps", str(args.steps), "--out", paths["out.safetensors"]]
print(" ".join(cmd))
subprocess.run(cmd, check=True)
out = load_file(paths["out.safetensors"])

# PyTorch: K steps of clip + Adam + Polyak, gradient and loss of the last step kept.
leaves = {f"{n}.{k}": t.clone().requires_grad_(True) for n, l in online.items() for k, t in l.items()}
tgt = {f"{n}.{k}": t.clone() for n, l in target.items() for k, t in l.items()}
opt = torch.optim.Adam(leaves.values(), lr=cfg["lr"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]), eps=cfg["adam_eps"])
nest = lambda flat: {n: {"weight": flat[f"{n}.weight"], "bias": flat[f"{n}.bias"]} for n in online}
for step in range(args.steps):
    opt.zero_grad()
    loss, prio = loss_fn(nest(leaves), nest(tgt), batch)
    loss.backward()
    grads = {k: v.grad.clone() for k, v in leaves.items()}
    norm = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    scale = min(1.0, cfg["max_grad_norm"] / (norm.item() + 1e-6))
    for v in leaves.values():
        v.grad.mul_(scale)
    opt.step()
    with torch.no_grad():
        for k in tgt:
            tgt[k] += cfg["tau"] * (leaves[k] - tgt[k])

tol = 1e-4 if args.precision == "fp32" else 1e-2
def rel(x, y):
    x, y = x.double().flatten(), y.double().flatten()
    return ((x - y).norm() / max(y.norm().item(), 1e-30)).item()
rows = [("loss", rel(out["loss"], loss.detach().view(1))), ("priorities", rel(out["priorities"], prio.detach())),
        ("grad_norm", rel(out["grad_norm"], norm.detach().view(1)))]
rows += [(f"grad.{k}", rel(out[f"grad.{k}"], grads[k])) for k in grads]
rows += [(f"param.{k}", rel(out[f"param.{k}"] - online[k.rsplit('.', 1)[0]][k.rsplit('.', 1)[1]],
                            leaves[k].detach() - online[k.rsplit('.', 1)[0]][k.rsplit('.', 1)[1]])) for k in leaves]
rows += [(f"target.{k}", rel(out[f"target.{k}"], tgt[k])) for k in tgt]
worst = max(rows, key=lambda r: r[1])
for name, e in rows:
    print(f"  {name:28s} rel. error {e:.2e}{'  <-- over ' + str(tol) if e > tol else ''}")
print(f"torch_check ({args.precision}, {args.steps} steps, B={B}{', all done' if args.all_done else ''}): worst {worst[0]} {worst[1]:.2e}, tolerance {tol:.0e}: "
      f"{'PASS' if worst[1] <= tol else 'FAIL'}")
sys.exit(0 if worst[1] <= tol else 1)
