"""Adam (Kingma and Ba 2015, "Adam: A Method for Stochastic Optimization"), the learners' optimizer.

For each parameter ``p`` with gradient ``g`` at step ``t``:

    g   <- g + weight_decay * p                  (L2 weight decay, as torch.optim.Adam's)
    m   <- beta1 * m + (1 - beta1) * g
    v   <- beta2 * v + (1 - beta2) * g^2
    p   <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

the same operations in the same order as ``torch.optim.Adam``'s single-tensor path, its default
on CPU, and its multi-tensor path, its default on a GPU, so the two give equal parameters bit for
bit (``tests/test_optim.py``), and the same ``state_dict`` layout, so either loads the other's
saved state. It is written here because any use of ``torch.optim``, constructing an optimizer
included, imports ``torch._dynamo``, which costs as much CPU as importing torch: every learner
and prober process would pay it at start-up (``python -m bench.startup``)."""

from __future__ import annotations

from typing import Any, Iterable

import torch


class Adam:
    """``torch.optim.Adam(params, lr, betas, eps, weight_decay, foreach)`` without amsgrad, maximize
    or decoupled decay: ``step``, ``zero_grad``, ``state_dict``, ``load_state_dict`` and
    ``param_groups`` (one group; the learners set its ``lr`` and ``weight_decay``).

    ``foreach`` chooses torch's multi-tensor path (a few ``torch._foreach_*`` kernels for all the
    parameters) over its per-tensor one; None, as in torch, takes it when every parameter is on a
    GPU."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, foreach: bool | None = None):
        params = list(params)
        if not params:
            raise ValueError("Adam got no parameters")
        if not (lr >= 0.0 and eps >= 0.0 and weight_decay >= 0.0 and 0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Adam: invalid lr {lr}, betas {betas}, eps {eps} or weight_decay {weight_decay}")
        self.param_groups: list[dict[str, Any]] = [{"params": params, "lr": lr, "betas": tuple(betas), "eps": eps,
                                                    "weight_decay": weight_decay, "foreach": foreach}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @property
    def params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        lr, (beta1, beta2), eps, weight_decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        params = [p for p in self.params if p.grad is not None]
        for p in params:
            if p not in self.state:
                self.state[p] = {"step": torch.tensor(0.0, device="cpu"),
                                 "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                 "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        foreach = group["foreach"]
        if foreach is None:
            foreach = all(p.device.type in ("cuda", "xpu") for p in self.params)
        if not foreach:
            for p in params:
                self._step_one(p, lr, beta1, beta2, eps, weight_decay)
            return
        by_kind: dict[tuple, list[torch.Tensor]] = {}
        for p in params:
            by_kind.setdefault((p.device, p.dtype), []).append(p)
        for same in by_kind.values():
            self._step_many(same, lr, beta1, beta2, eps, weight_decay)

    def _step_one(self, p: torch.Tensor, lr: float, beta1: float, beta2: float, eps: float,
                  weight_decay: float) -> None:
        """``torch.optim.adam._single_tensor_adam`` for one parameter."""
        state = self.state[p]
        grad, exp_avg, exp_avg_sq = p.grad, state["exp_avg"], state["exp_avg_sq"]
        state["step"] += 1
        if weight_decay != 0:
            grad = grad.add(p, alpha=weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = state["step"].item()
        bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
        denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        p.addcdiv_(exp_avg, denom, value=-(lr / (1 - beta1 ** step)))

    def _step_many(self, params: list[torch.Tensor], lr: float, beta1: float, beta2: float, eps: float,
                   weight_decay: float) -> None:
        """``torch.optim.adam._multi_tensor_adam`` for parameters of one device and dtype."""
        states = [self.state[p] for p in params]
        grads = [p.grad for p in params]
        exp_avgs, exp_avg_sqs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, torch.tensor(1.0, device="cpu"), alpha=1.0)
        if weight_decay != 0:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        counts = [s.item() for s in steps]
        step_sizes = [(lr / (1 - beta1 ** n)) * -1 for n in counts]
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, [(1 - beta2 ** n) ** 0.5 for n in counts])
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(params, exp_avgs, denom, step_sizes)

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam``'s layout: state by parameter index, one group with its settings."""
        group = self.param_groups[0]
        index = {id(p): i for i, p in enumerate(self.params)}
        settings = {k: v for k, v in group.items() if k != "params"}
        return {"state": {index[id(p)]: dict(s) for p, s in self.state.items()},
                "param_groups": [{**settings, "amsgrad": False, "maximize": False,
                                  "capturable": False, "differentiable": False, "fused": None,
                                  "decoupled_weight_decay": False, "params": list(range(len(self.params)))}]}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Load a state saved by this class or by ``torch.optim.Adam`` (one group, these parameters'
        shapes); its tensors move to each parameter's device. Raises ValueError when it does not fit."""
        groups = saved.get("param_groups") if isinstance(saved, dict) else None
        if not isinstance(groups, list) or len(groups) != 1 or not isinstance(saved.get("state"), dict):
            raise ValueError("not the saved state of a one-group Adam")
        group = groups[0]
        if len(group.get("params", ())) != len(self.params):
            raise ValueError(f"saved for {len(group.get('params', ()))} parameters, not {len(self.params)}")
        if group.get("amsgrad") or group.get("maximize") or group.get("decoupled_weight_decay"):
            raise ValueError("saved by an Adam with amsgrad, maximize or decoupled weight decay")
        state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        for position, index in enumerate(group["params"]):
            entry = saved["state"].get(index)
            if entry is None:
                continue
            p = self.params[position]
            if set(entry) != {"step", "exp_avg", "exp_avg_sq"}:
                raise ValueError(f"parameter {index}: state keys {sorted(entry)}")
            if entry["exp_avg"].shape != p.shape or entry["exp_avg_sq"].shape != p.shape:
                raise ValueError(f"parameter {index}: state of shape {tuple(entry['exp_avg'].shape)}, "
                                 f"parameter of shape {tuple(p.shape)}")
            step = entry["step"]  # a number in checkpoints of old torch versions, as torch reads them
            state[p] = {"step": step.detach().clone().cpu() if torch.is_tensor(step) else torch.tensor(float(step)),
                        "exp_avg": entry["exp_avg"].detach().to(dtype=p.dtype, device=p.device, copy=True),
                        "exp_avg_sq": entry["exp_avg_sq"].detach().to(dtype=p.dtype, device=p.device, copy=True)}
        settings = {k: group[k] for k in ("lr", "betas", "eps", "weight_decay", "foreach") if k in group}
        self.param_groups[0].update(settings, betas=tuple(settings.get("betas", self.param_groups[0]["betas"])))
        self.state = state
