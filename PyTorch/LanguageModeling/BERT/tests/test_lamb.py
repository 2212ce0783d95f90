"""LAMB against Adam (trust ratio off) and against a per-element reference of the paper's update."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from bert.lamb import Lamb, lamb_implementation, warmup_poly_schedule
from torch import nn
from zoo.torch import parameter_groups


def tiny_problem(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    x, y = torch.randn(16, 6), torch.randn(16, 3)
    return model, x, y


def run(model, optimizer, x, y, steps=5):
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def test_lamb_without_trust_ratio_is_adam():
    a, x, y = tiny_problem()
    b, _, _ = tiny_problem()
    run(a, Lamb(a.parameters(), lr=1e-2, weight_decay=0.0, max_grad_norm=None, adapt=False, eps=1e-6), x, y)
    run(b, torch.optim.Adam(b.parameters(), lr=1e-2, eps=1e-6), x, y)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def reference_lamb(params, grads_per_step, lr, b1, b2, eps, wd, max_norm):
    """Numpy, one element at a time in spirit: the update as written in the paper + global clipping."""
    w = [p.copy() for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t, grads in enumerate(grads_per_step, start=1):
        total = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))
        clip = max(total / max_norm, 1.0)
        for i, g in enumerate(grads):
            g = g / clip
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            u = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps) + wd * w[i]
            wn, un = np.linalg.norm(w[i]), np.linalg.norm(u)
            ratio = wn / un if wn > 0 and un > 0 else 1.0
            w[i] = w[i] - lr * ratio * u
    return w


@pytest.mark.parametrize("implementation", ["foreach", "per_tensor", "fused_adam"])
def test_lamb_matches_the_reference_update(implementation):
    torch.manual_seed(3)
    params = [nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.randn(5))]
    grads_per_step = [[torch.randn_like(p) * 3 for p in params] for _ in range(4)]
    expected = reference_lamb(
        [p.detach().numpy() for p in params],
        [[g.numpy() for g in grads] for grads in grads_per_step],
        lr=0.05, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, max_norm=1.0,
    )  # fmt: skip
    optimizer = Lamb(params, lr=0.05, weight_decay=0.01, max_grad_norm=1.0, implementation=implementation)
    for grads in grads_per_step:
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
    for p, e in zip(params, expected, strict=True):
        np.testing.assert_allclose(p.detach().numpy(), e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("implementation", ["foreach", "per_tensor", "fused_adam"])
def test_master_weights_run_the_fp32_update_and_write_bf16(implementation):
    """A bf16 model with fp32 masters: the masters follow the paper's fp32 update driven by the bf16
    gradients, the parameters are the masters rounded to bf16, and a state-dict round trip keeps them."""
    torch.manual_seed(4)
    init = [torch.randn(4, 3).bfloat16(), torch.randn(5).bfloat16()]
    grads_per_step = [[(torch.randn(p.shape) * 3).bfloat16() for p in init] for _ in range(4)]
    expected = reference_lamb(
        [p.float().numpy() for p in init],
        [[g.float().numpy() for g in grads] for grads in grads_per_step],
        lr=0.05, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, max_norm=1.0,
    )  # fmt: skip
    params = [nn.Parameter(p.clone()) for p in init]
    optimizer = Lamb(params, lr=0.05, weight_decay=0.01, implementation=implementation, master_weights=True)
    for k, grads in enumerate(grads_per_step):
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
        if k == 1:
            optimizer.load_state_dict(optimizer.state_dict())
    for p, e, p0 in zip(params, expected, init, strict=True):
        master = optimizer.state[p]["master"]
        assert p.dtype == torch.bfloat16 and master.dtype == torch.float32
        np.testing.assert_allclose(master.numpy(), e, rtol=1e-5, atol=1e-6)
        assert torch.equal(p.detach(), master.bfloat16())
        assert not torch.equal(p.detach(), p0)  # it moved


@pytest.mark.parametrize("implementation", ["foreach", "fused_adam"])
def test_accumulated_bf16_gradients_are_summed_in_fp32(implementation):
    """Three micro-steps of bf16 gradients per step: the update is the paper's with their fp32 sum.
    A bf16 running sum would differ: 256 + 1 rounds to 256 in bf16."""
    torch.manual_seed(6)
    init = [torch.randn(4, 3).bfloat16(), torch.randn(5).bfloat16()]
    micro = [[[(torch.randn(p.shape) * 3).bfloat16() for p in init] for _ in range(3)] for _ in range(2)]
    micro[0][0][1][0] = 256.0  # one large and two small contributions to the same element
    micro[0][1][1][0] = micro[0][2][1][0] = 1.0
    sums = [[sum(m[k].float() for m in step) for k in range(len(init))] for step in micro]
    assert float(sums[0][1][0]) == 258.0
    expected = reference_lamb(
        [p.float().numpy() for p in init], [[g.numpy() for g in step] for step in sums],
        lr=0.05, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, max_norm=1.0,
    )  # fmt: skip
    params = [nn.Parameter(p.clone()) for p in init]
    optimizer = Lamb(params, lr=0.05, weight_decay=0.01, implementation=implementation, master_weights=True)
    for step in micro:
        for grads in step:
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            optimizer.accumulate_grads()
            assert all(p.grad is None for p in params)
        optimizer.step()
    assert set(optimizer.state_dict()["state"][0]) == {"master", "step", "exp_avg", "exp_avg_sq"}
    before = [optimizer.state[p]["master"].clone() for p in params]
    params[0].grad = torch.ones_like(params[0])
    optimizer.accumulate_grads()
    optimizer.zero_grad()  # discards the sums: the next step has no gradient to apply
    optimizer.step()
    assert all(torch.equal(optimizer.state[p]["master"], b) for p, b in zip(params, before, strict=True))
    for p, e in zip(params, expected, strict=True):
        np.testing.assert_allclose(optimizer.state[p]["master"].numpy(), e, rtol=1e-5, atol=1e-6)


def test_lamb_groups_exclude_bias_and_layernorm():
    """The groups pretraining gives LAMB: matrices decayed and layer-adapted, the rest neither."""
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    decay, plain = parameter_groups(model, 0.01, adapt=True)
    assert [p.shape for p in decay["params"]] == [torch.Size([4, 4])]
    assert decay["weight_decay"] == 0.01 and decay["adapt"]
    assert len(plain["params"]) == 3 and plain["weight_decay"] == 0 and not plain["adapt"]


def test_warmup_then_poly_decay():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = warmup_poly_schedule(opt, total_steps=10, warmup=0.2, power=0.5)
    lrs = []
    for _ in range(10):
        lrs.append(schedule.get_last_lr()[0])
        opt.step()
        schedule.step()
    assert lrs[0] == 0.5 and lrs[1] == 1.0
    assert all(a > b for a, b in zip(lrs[2:], lrs[3:], strict=False)) and lrs[-1] > 0
    np.testing.assert_allclose(lrs[6], (1 - 4 / 8) ** 0.5)


@pytest.mark.parametrize("implementation", ["per_tensor", "fused_adam"])
def test_other_lamb_implementations_equal_foreach_lamb(implementation):
    a, x, y = tiny_problem(1)
    b, _, _ = tiny_problem(1)
    run(a, Lamb(parameter_groups(a, 0.01, adapt=True), lr=1e-2), x, y, steps=3)
    run(b, Lamb(parameter_groups(b, 0.01, adapt=True), lr=1e-2, implementation=implementation), x, y, steps=3)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


TRITON_CHECK = r"""
import json, sys
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
from bert.lamb import Lamb
from test_lamb import reference_lamb

torch.manual_seed(5)
shapes = [(40000,), (7, 3), (5,)]  # the first spans three chunks, the last ends mid-block
steps = [[torch.randn(s) * 3 for s in shapes] for _ in range(4)]
init = [torch.randn(s) for s in shapes]
report = {}
# one adapted, decayed group against the paper's update
params = [torch.nn.Parameter(p.clone()) for p in init]
opt = Lamb(params, lr=0.05, weight_decay=0.01, max_grad_norm=1.0, implementation="triton")
for k, grads in enumerate(steps):
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
    if k == 1:  # a checkpoint round trip half-way: new state tensors, tables rebuilt
        opt.load_state_dict(opt.state_dict())
expected = reference_lamb([p.numpy() for p in init], [[g.numpy() for g in gs] for gs in steps],
                          lr=0.05, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, max_norm=1.0)
report["vs_reference"] = max(float(np.abs(p.detach().numpy() - e).max() / (np.abs(e).max())) for p, e in zip(params, expected))
report["moved"] = max(float((p.detach() - q).abs().max()) for p, q in zip(params, init))
# two groups (decayed+adapted, plain) against the foreach implementation
results = []
for implementation in ("foreach", "triton"):
    params = [torch.nn.Parameter(p.clone()) for p in init]
    groups = [{"params": params[:2], "weight_decay": 0.01, "adapt": True},
              {"params": params[2:], "weight_decay": 0.0, "adapt": False}]
    opt = Lamb(groups, lr=0.05, implementation=implementation)
    for grads in steps:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
    results.append([p.detach().clone() for p in params])
report["vs_foreach"] = max(float((a - b).abs().max()) for a, b in zip(*results))
# master weights: bf16 parameters and gradients, fp32 masters
init16 = [p.bfloat16() for p in init]
steps16 = [[g.bfloat16() for g in gs] for gs in steps]
params = [torch.nn.Parameter(p.clone()) for p in init16]
opt = Lamb(params, lr=0.05, weight_decay=0.01, implementation="triton", master_weights=True)
for grads in steps16:
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
expected = reference_lamb([p.float().numpy() for p in init16], [[g.float().numpy() for g in gs] for gs in steps16],
                          lr=0.05, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, max_norm=1.0)
masters = [opt.state[p]["master"] for p in params]
report["master_vs_reference"] = max(float(np.abs(m.numpy() - e).max() / np.abs(e).max()) for m, e in zip(masters, expected))
# the bf16 parameter within one bf16 step (2^-8 relative) of its master: Triton's interpreter
# rounds toward zero where the GPU rounds to nearest (the GPU test checks equality)
report["copy_vs_master"] = max(float(((p.detach().float() - m).abs() / m.abs().clamp_min(1e-30)).max()) for p, m in zip(params, masters))
report["copy_dtype"] = str(params[0].dtype)
# gradient accumulation into fp32 sums (two micro-steps a step), Triton against foreach
finals = []
for implementation in ("foreach", "triton"):
    params = [torch.nn.Parameter(p.clone()) for p in init16]
    opt = Lamb(params, lr=0.05, weight_decay=0.01, implementation=implementation, master_weights=True)
    for a, b in zip(steps16[::2], steps16[1::2]):
        for grads in (a, b):
            for p, g in zip(params, grads):
                p.grad = g.clone()
            opt.accumulate_grads()
        opt.step()
    finals.append([opt.state[p]["master"] for p in params])
report["accumulated_vs_foreach"] = max(float((a - b).abs().max()) for a, b in zip(*finals))
# the per-tensor norm summed over several reduce blocks (bert-large's word embeddings span 1,908
# chunks, two blocks of 1,024): blocks of 2 chunks, so the first tensor's three chunks take two
import bert.lamb_triton
bert.lamb_triton.REDUCE_BLOCK = 2
finals = []
for implementation in ("foreach", "triton"):
    params = [torch.nn.Parameter(p.clone()) for p in init]
    opt = Lamb(params, lr=0.05, weight_decay=0.01, implementation=implementation)
    for grads in steps:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
    finals.append([p.detach().clone() for p in params])
report["reduced_in_blocks_vs_foreach"] = max(float((a - b).abs().max()) for a, b in zip(*finals))
print(json.dumps(report))
"""


def test_triton_lamb_kernels_in_the_interpreter(model_dir):
    """The Triton kernels run on the CPU through Triton's interpreter: same update as the paper's."""
    pytest.importorskip("triton")
    out = subprocess.run(
        [sys.executable, "-c", TRITON_CHECK, str(model_dir)],
        capture_output=True, text=True, timeout=600, cwd=str(model_dir / "tests"),
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["moved"] > 1e-3  # the parameters did change
    assert report["vs_reference"] < 1e-5, report
    assert report["vs_foreach"] < 1e-5, report
    assert report["master_vs_reference"] < 1e-5, report
    assert report["copy_vs_master"] <= 2**-7 and report["copy_dtype"] == "torch.bfloat16", report
    assert report["accumulated_vs_foreach"] < 1e-5, report
    assert report["reduced_in_blocks_vs_foreach"] < 1e-5, report


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (compiled Triton kernels)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_lamb_equals_foreach_on_gpu(dtype):
    """fp32 parameters, or bf16 parameters with fp32 masters (bf16 gradients read by the kernels)."""
    torch.manual_seed(2)
    init = [torch.randn(s, device="cuda").to(dtype) for s in [(3000, 17), (1024,), (33,)]]
    finals = []
    for implementation in ("foreach", "triton"):
        params = [nn.Parameter(p.clone()) for p in init]
        groups = [{"params": params[:2], "weight_decay": 0.01, "adapt": True},
                  {"params": params[2:], "weight_decay": 0.0, "adapt": False}]  # fmt: skip
        optimizer = Lamb(groups, lr=0.02, implementation=implementation, master_weights=True)
        generator = torch.Generator(device="cuda").manual_seed(7)
        for _ in range(5):
            for p in params:
                p.grad = torch.randn(p.shape, device="cuda", generator=generator).to(dtype)
            optimizer.step()
        finals.append([optimizer.state[p].get("master", p) for p in params] + params)
    for p, q in zip(*finals, strict=True):
        if p.dtype == torch.bfloat16:  # the parameters: their masters rounded to nearest
            torch.testing.assert_close(p, q, atol=0, rtol=2**-8)
        else:
            torch.testing.assert_close(p, q, atol=2e-6, rtol=1e-5)
    masters_and_params = finals[1]
    for master, p in zip(masters_and_params[:3], masters_and_params[3:], strict=True):
        assert torch.equal(p.detach(), master.to(dtype))


def test_auto_implementation_picks_triton_on_cuda_only():
    assert lamb_implementation("auto", "cuda") == "triton"
    assert lamb_implementation("auto", torch.device("cpu")) == "foreach"
    assert lamb_implementation("fused_adam", "cpu") == "fused_adam"
    with pytest.raises(ValueError, match="unknown LAMB implementation 'fast'"):
        lamb_implementation("fast", "cuda")
