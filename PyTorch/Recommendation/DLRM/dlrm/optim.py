"""Optimizers and the learning-rate schedule shared by both embedding paths."""

from __future__ import annotations

import torch
from zoo.errors import UserError

EPS = 1e-8


class RowWiseAdagrad(torch.optim.Optimizer):
    """Row-wise Adagrad for embedding tables, the update fbgemm's fused kernel makes
    (EXACT_ROWWISE_ADAGRAD): per row, state += mean(g^2); w -= lr * g / (sqrt(state) + eps).

    A sparse gradient (coalesced rows, as ``FusedEmbeddingBags`` gives) updates only its rows: the
    same numbers as the dense update, where a row with g = 0 keeps its state and weight.
    """

    def __init__(self, params, lr: float, eps: float = EPS):
        super().__init__(params, {"lr": lr, "eps": eps})
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["sum"] = torch.zeros(p.shape[0], dtype=torch.float32, device=p.device)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]["sum"]
                if p.grad.is_sparse:
                    rows, values = _distinct_rows(p.grad)
                    # Fewest passes over the [rows, dim] values: one norm, one scaled copy, one index_add.
                    mean_square = torch.linalg.vector_norm(values, dim=1).square_().div_(values.shape[1])
                    row_sum = state.index_select(0, rows).add_(mean_square)
                    state.index_copy_(0, rows, row_sum)
                    scale = row_sum.sqrt_().add_(group["eps"]).reciprocal_().mul_(-group["lr"])
                    p.index_add_(0, rows, (values * scale.unsqueeze(1)).to(p.dtype))
                    continue
                grad = p.grad.float()
                state.add_(grad.pow(2).mean(1))
                p.add_(grad / (state.sqrt() + group["eps"]).unsqueeze(1), alpha=-group["lr"])


def _distinct_rows(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, float32 values) of a sparse row gradient with each row once. Autograd drops the
    coalesced flag of the fused table's gradient although its rows are distinct and ascending:
    checking that is one pass over the row ids, where coalescing would sort and copy the values."""
    rows, values = grad._indices()[0], grad._values()
    if not grad.is_coalesced() and not bool((rows[1:] > rows[:-1]).all()):
        grad = grad.coalesce()
        rows, values = grad._indices()[0], grad._values()
    return rows, values.float()


class KernelTableOptimizer(torch.optim.Optimizer):
    """SGD or row-wise Adagrad of a ``FusedEmbeddingBags`` table done by its Triton backward
    (``speed.table_kernels: triton``, ``dlrm.table_kernels``): each backward updates the touched
    rows in place with this optimizer's current ``lr``, so ``step`` has nothing left to do. Same
    param groups and ``sum`` state as ``RowWiseAdagrad`` (none for SGD): schedules and checkpoints
    treat both alike. No loss scaling: the update happens before a scaler could skip a step."""

    def __init__(self, table, name: str, lr: float, eps: float = EPS):
        super().__init__([table.weight], {"lr": lr, "eps": eps})
        self.weight = table.weight
        self.rowwise_adagrad = name == "rowwise_adagrad"
        if self.rowwise_adagrad:
            self.state[self.weight]["sum"] = torch.zeros(
                self.weight.shape[0], dtype=torch.float32, device=self.weight.device
            )
        table.update_in_backward = self.update_rows

    @torch.no_grad()
    def update_rows(self, bag_grad: torch.Tensor, ids: torch.Tensor, bag_of_id: torch.Tensor) -> None:
        """One update of the rows in ``ids`` (the backward's call)."""
        from dlrm.table_kernels import update_touched_rows

        group = self.param_groups[0]
        state = self.state[self.weight]["sum"] if self.rowwise_adagrad else None
        update_touched_rows(self.weight.detach(), state, bag_grad, ids, bag_of_id, group["lr"], group["eps"])

    def step(self, closure=None):
        return None


def dense_optimizer(params, cfg: dict):
    """``optimizer``: {name: adagrad|sgd, lr}; Adagrad as MLPerf's DCNv2 reference (eps 1e-8, no decay)."""
    name, lr = cfg.get("name", "adagrad"), float(cfg["lr"])
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, eps=EPS)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise UserError(f"optimizer.name must be adagrad or sgd, not {name!r}")


def sparse_optimizer_spec(cfg: dict):
    """``sparse_optimizer``: {name: rowwise_adagrad|sgd, lr} -> (name, lr)."""
    name = cfg.get("name", "rowwise_adagrad")
    if name not in ("rowwise_adagrad", "sgd"):
        raise UserError(f"sparse_optimizer.name must be rowwise_adagrad or sgd, not {name!r}")
    return name, float(cfg["lr"])


def plain_sparse_optimizer(params, cfg: dict, *, kernels_table=None):
    """The plain path's table optimizer: row-wise Adagrad or SGD, both touching only the rows of a
    sparse gradient (torch's SGD adds a sparse gradient row by row); with ``kernels_table`` (a
    ``FusedEmbeddingBags``) the same update by that table's Triton backward."""
    name, lr = sparse_optimizer_spec(cfg)
    if kernels_table is not None:
        return KernelTableOptimizer(kernels_table, name, lr)
    return RowWiseAdagrad(params, lr=lr) if name == "rowwise_adagrad" else torch.optim.SGD(params, lr=lr)


def lr_factor(step: int, cfg: dict) -> float:
    """``schedule``: {warmup_steps, decay_start, decay_steps}: linear warm-up, then DLRM's
    polynomial (power 2) decay to 0 over decay_steps from decay_start; all 0 = constant."""
    warmup = int(cfg.get("warmup_steps", 0))
    start, steps = int(cfg.get("decay_start", 0)), int(cfg.get("decay_steps", 0))
    if warmup and step < warmup:
        return (step + 1) / warmup
    if steps and step >= start:
        return max(0.0, 1 - (step - start) / steps) ** 2
    return 1.0
