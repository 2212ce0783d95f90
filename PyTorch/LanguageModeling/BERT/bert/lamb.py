"""LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019) and its LR schedule.

Per parameter tensor p with gradient g (after optional clipping of the global gradient norm):
    m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,  m^ = m / (1 - b1^t),  v^ = v / (1 - b2^t)
    u = m^ / (sqrt(v^) + eps) + wd p
    r = ||p|| / ||u||  (1 where either norm is 0, or for groups with adapt=False)
    p = p - lr r u
Biases and LayerNorm weights go in a group with wd=0 and adapt=False (the original recipe:
``zoo.torch.parameter_groups(model, weight_decay, adapt=True)`` builds both groups). The
update runs on whole parameter lists with `torch._foreach_*` ops (a handful of kernels per step).

With ``master_weights=True`` a model held in bf16/fp16 trains as in mixed precision with fp32
weights: each parameter keeps an fp32 copy in the optimizer state ("master", taken when the
optimizer is built, so build it before converting the model), the update runs on that copy with
the gradient taken to fp32, and the parameter is written from it. For gradient accumulation,
``accumulate_grads()`` after each micro-step's backward adds the half-precision gradients into fp32
sums held by the optimizer (a bf16 sum would drop small contributions); the next ``step()`` uses them.
"""

from __future__ import annotations

import torch


class Lamb(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        max_grad_norm: float | None = 1.0,
        adapt: bool = True,
        implementation: str = "foreach",
        master_weights: bool = False,
    ):
        """implementation: "foreach" (multi-tensor ops, ~30 passes over the state), "fused_adam"
        (PyTorch's fused Adam kernel computes the Adam direction into a scratch buffer in one pass,
        then weight decay, trust ratio and the update: about 21 passes), "triton" (two Triton
        kernels over all tensors of a group, about 11 passes: bert/lamb_triton.py; CUDA only),
        or "per_tensor" (one plain function per chunk of tensors). All keep the same state, so a
        checkpoint moves between them.
        master_weights: keep fp32 copies of the parameters and update those (module docstring)."""
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"bad LAMB hyper-parameters lr={lr} betas={betas} eps={eps}")
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"unknown LAMB implementation {implementation!r}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adapt=adapt)
        super().__init__(params, defaults)
        self.max_grad_norm = max_grad_norm
        self.implementation = implementation
        self.master_weights = master_weights
        self._scratch: dict[torch.Tensor, torch.Tensor] = {}
        self._tables: dict[int, object] = {}  # triton: per-group address tables
        self._grad_sums: dict[torch.Tensor, torch.Tensor] = {}  # accumulate_grads: fp32, not in state
        self._summed: set[torch.Tensor] = set()  # parameters with a gradient in the current sums
        self._host_step: dict[int, int] = {}  # triton: the step count, kept on the host too
        if master_weights:
            for group in self.param_groups:
                for p in group["params"]:
                    self.state[p]["master"] = _fp32_copy(p)

    @torch.no_grad()
    def accumulate_grads(self) -> None:
        """Add each parameter's ``.grad`` into an fp32 sum kept by the optimizer, then drop ``.grad``.
        Call after every micro-step's backward; the next ``step()`` updates with the sums."""
        fresh, added = ([], []), ([], [])
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p not in self._grad_sums:
                    self._grad_sums[p] = torch.empty(p.shape, dtype=torch.float32, device=p.device)
                target = added if p in self._summed else fresh
                target[0].append(self._grad_sums[p])
                target[1].append(p.grad)
                self._summed.add(p)
                p.grad = None
        if fresh[0]:
            torch._foreach_copy_(*fresh)  # the first micro-step of a step: no zeroing pass
        if added[0]:
            torch._foreach_add_(*added)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Also drops the gradient sums of accumulate_grads (a step() consumes them anyway)."""
        super().zero_grad(set_to_none)
        self._summed.clear()

    def _grad(self, p: torch.Tensor) -> torch.Tensor | None:
        if self._summed:
            return self._grad_sums[p] if p in self._summed else None
        return p.grad

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        with_grads = [
            [(p, g) for p in group["params"] if (g := self._grad(p)) is not None]
            for group in self.param_groups
        ]
        grads_all = [g for pairs in with_grads for _, g in pairs]
        if not grads_all:
            return loss
        clip = None
        if self.max_grad_norm:
            # global norm over every gradient; the division stays on the device (no host sync)
            norms = torch._foreach_norm(grads_all, 2.0, dtype=torch.float32)
            total = torch.linalg.vector_norm(torch.stack(norms), 2.0)
            clip = torch.clamp(total / self.max_grad_norm, min=1.0)
        for index, (group, pairs) in enumerate(zip(self.param_groups, with_grads, strict=True)):
            if not pairs:
                continue
            params = [p for p, _ in pairs]
            grads = [g for _, g in pairs]
            copies = None  # with master weights: the half-precision parameters to write back
            for p in params:
                state = self.state[p]
                if self.master_weights and "master" not in state:
                    state["master"] = _fp32_copy(p)
                if "step" not in state:
                    ref = state.get("master", p)
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = torch.zeros_like(ref, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(ref, memory_format=torch.preserve_format)
            if any("master" in self.state[p] for p in params):
                copies = params
                params = [self.state[p].get("master", p) for p in params]
                if self.implementation != "triton":  # the Triton kernels read half-precision gradients
                    grads = [g.float() if g.dtype != torch.float32 else g for g in grads]
            if clip is not None and self.implementation in ("foreach", "fused_adam"):
                torch._foreach_div_(grads, clip)  # in place: no second copy of every gradient
            keys = copies if copies is not None else params
            steps = [self.state[p]["step"] for p in keys]
            m = [self.state[p]["exp_avg"] for p in keys]
            v = [self.state[p]["exp_avg_sq"] for p in keys]
            torch._foreach_add_(steps, 1.0)
            if self.implementation == "triton":
                self._step_triton(index, group, params, grads, m, v, steps, clip, copies)
                continue
            if self.implementation == "fused_adam":
                self._step_fused_adam(group, params, grads, m, v, steps)
            elif self.implementation != "foreach":
                self._step_per_tensor(group, params, grads, m, v, steps[0], clip)
            else:
                self._step_foreach(group, params, grads, m, v, steps[0])
            if copies is not None:
                torch._foreach_copy_(copies, params)
        self._summed.clear()  # the next accumulate_grads starts new sums
        return loss

    def _step_foreach(self, group, params, grads, m, v, t) -> None:
        beta1, beta2 = group["betas"]
        torch._foreach_lerp_(m, grads, 1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        bias1 = 1 - beta1**t
        bias2_sqrt = torch.sqrt(1 - beta2**t)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, group["eps"])
        update = torch._foreach_div(m, denom)
        torch._foreach_div_(update, bias1)
        _apply_update(group, params, update)

    def _step_fused_adam(self, group, params, grads, m, v, steps) -> None:
        beta1, beta2 = group["betas"]
        # scratch buffers kept out of `state`, so checkpoints do not carry them
        for p in params:
            if p not in self._scratch:
                self._scratch[p] = torch.empty_like(p)
        update = [self._scratch[p] for p in params]
        torch._foreach_zero_(update)
        # lr=-1 on a zero buffer: update = m^ / (sqrt(v^) + eps), moments advanced in place
        torch._fused_adam_(
            update, grads, m, v, [], steps, lr=-1.0, beta1=beta1, beta2=beta2, weight_decay=0.0,
            eps=group["eps"], amsgrad=False, maximize=False,
        )  # fmt: skip
        _apply_update(group, params, update)

    def _step_triton(self, index, group, params, grads, m, v, steps, clip, copies) -> None:
        from bert import lamb_triton

        tables = self._tables.get(index)
        if tables is None or tables.ids != tuple(map(id, params)):
            tables = self._tables[index] = lamb_triton.GroupTables(params, m, v, copies)
        if index not in self._host_step:
            self._host_step[index] = int(steps[0].item()) - 1  # once: after a start or a load
        self._host_step[index] += 1
        if clip is None:
            clip = torch.ones((), dtype=torch.float32, device=params[0].device)
        beta1, beta2 = group["betas"]
        lamb_triton.lamb_group_step(
            tables, grads, clip, lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
            weight_decay=group["weight_decay"], adapt=group["adapt"], step=self._host_step[index],
        )  # fmt: skip

    def load_state_dict(self, state_dict) -> None:
        saved = state_dict["state"]
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        super().load_state_dict(state_dict)
        # torch casts floating-point state to its parameter's dtype: a half-precision parameter's
        # fp32 master and moments are put back as they were saved
        for i, p in zip(ids, params, strict=False):
            for key in ("master", "exp_avg", "exp_avg_sq"):
                value = saved.get(i, {}).get(key)
                if value is not None and value.dtype == torch.float32 and p.dtype != torch.float32:
                    self.state[p][key] = value.to(p.device, copy=True)
            if self.master_weights and "master" not in self.state[p]:  # saved without master weights
                self.state[p]["master"] = _fp32_copy(p)
        self._summed.clear()
        # new state tensors: the address tables and the host step count are rebuilt
        self._tables.clear()
        self._host_step.clear()
        self._scratch.clear()

    def _step_per_tensor(self, group, params, grads, m, v, step, clip) -> None:
        beta1, beta2 = group["betas"]
        device = params[0].device
        lr = torch.full((), group["lr"], dtype=torch.float32, device=device)
        bias1 = 1 - beta1**step
        bias2 = 1 - beta2**step
        if clip is None:
            clip = torch.ones((), dtype=torch.float32, device=device)
        for start in range(0, len(params), _CHUNK):
            end = start + _CHUNK
            _update_tensors(
                params[start:end], grads[start:end], m[start:end], v[start:end], clip, lr, bias1, bias2,
                beta1, beta2, group["eps"], group["weight_decay"], group["adapt"],
            )  # fmt: skip


def _apply_update(group: dict, params: list, update: list) -> None:
    """p -= lr * r * (update + wd p): weight decay, the trust ratios and the step, on lists of tensors."""
    if group["weight_decay"]:
        torch._foreach_add_(update, params, alpha=group["weight_decay"])
    if group["adapt"]:
        # all trust ratios in one vector: a few kernels, not a few per parameter tensor
        w_norm = torch.stack(torch._foreach_norm(params, 2.0))
        u_norm = torch.stack(torch._foreach_norm(update, 2.0))
        ratios = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
        torch._foreach_mul_(update, list(ratios.unbind(0)))
    torch._foreach_add_(params, update, alpha=-group["lr"])


def _fp32_copy(p: torch.Tensor) -> torch.Tensor:
    """A parameter's master weight: an fp32 copy of its value, in its memory layout."""
    return p.detach().float().clone(memory_format=torch.preserve_format)


IMPLEMENTATIONS = ("foreach", "fused_adam", "triton", "per_tensor")
_CHUNK = 16  # tensors per update call: small enough to compile quickly, large enough to amortise calls


def _update_tensors(params, grads, ms, vs, clip, lr, bias1, bias2, beta1, beta2, eps, weight_decay, adapt):
    """The LAMB update of a list of tensors, written per tensor (module docstring)."""
    for p, g, m, v in zip(params, grads, ms, vs, strict=True):
        g = g / clip
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        update = (m / bias1) / ((v / bias2).sqrt() + eps)
        if weight_decay:
            update = update + weight_decay * p
        if adapt:
            w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            update = update * ratio
        p.sub_(lr * update)


def lamb_implementation(name: str, device) -> str:
    """``auto`` -> "triton" on a CUDA device (fastest measured, PERF.md), "foreach" elsewhere."""
    if name != "auto":
        if name not in IMPLEMENTATIONS:
            raise ValueError(
                f"unknown LAMB implementation {name!r}; choose auto or one of {', '.join(IMPLEMENTATIONS)}"
            )
        return name
    return "triton" if torch.device(device).type == "cuda" else "foreach"


def warmup_poly_schedule(optimizer, *, total_steps: int, warmup: float, power: float = 0.5):
    """Linear warm-up over `warmup` (a fraction of total_steps if < 1, else a step count), then
    polynomial decay (1 - progress)^power to 0."""
    warmup_steps = warmup * total_steps if warmup < 1 else warmup

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1.0, total_steps - warmup_steps)
        return max(0.0, 1.0 - progress) ** power

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
