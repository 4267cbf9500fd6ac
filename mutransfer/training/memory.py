"""Check that one training step of a model fits the device *before* anything is allocated.

The estimate is :func:`operators.planning.plan_fno` for an FNO (counts by arithmetic,
activations exact for operators.fno, the peak of one Adam step at the training
precision) and :func:`operators.planning_attention.plan_attention` for the attention
operators (Galerkin, ONO, GNOT: exact parameter counts, activations within 20 % of the
measured peak). The device's memory is what is free now: ``torch.cuda.mem_get_info``
on a GPU, ``MemAvailable`` of /proc/meminfo on the CPU, or a limit the user sets
(``--device-memory``).
"""

from __future__ import annotations

import os

import torch

from mutransfer.errors import UserInputError
from operators.planning import FNOPlan, format_bytes, largest_batch, plan_fno
from operators.planning_attention import AttentionPlan, plan_attention, planned_families

#: FNO config keys (operators.fno.FNO.config) the planner needs
_FNO_KEYS = ("dim", "modes", "width", "layers", "in_channels", "out_channels", "projection_channels", "padding")


def available_memory(device: torch.device | str | None = None) -> tuple[int, str]:
    """(free bytes, description) of ``device``; None: the first GPU if there is one, else the CPU's RAM."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        free, _total = torch.cuda.mem_get_info(index)
        return int(free), f"free memory of cuda:{index} ({torch.cuda.get_device_name(index)})"
    return _cpu_available(), "available RAM of this machine"


def _cpu_available() -> int:
    from mutransfer.data.streaming import available_memory as ram_available

    available = ram_available()
    if available is None:
        raise UserInputError("the available RAM cannot be read on this system; pass --device-memory SIZE")
    return available


def is_fno_config(config) -> bool:
    """Whether ``config`` (a model's .config) describes an operators.fno.FNO."""
    return isinstance(config, dict) and all(k in config for k in _FNO_KEYS)


def is_attention_config(config) -> bool:
    """Whether ``config`` is a point-set adapter's .config (operators.adapters) of a planned attention operator."""
    return (isinstance(config, dict) and config.get("operator") in planned_families()
            and isinstance(config.get("operator_config"), dict))


def plan_attention_config(config: dict, grid: tuple[int, ...], batch: int, precision: str = "fp32",
                          weight_decay: float = 0.0, device: str = "cuda") -> AttentionPlan:
    """The plan of one training step of the adapter ``config`` on samples of shape ``grid`` (grid nodes, or (P,) packed)."""
    import math

    return plan_attention(config["operator"], config["operator_config"], points=int(math.prod(grid)),
                          batch=int(batch), precision=precision, weight_decay=weight_decay, device=device)


def plan_for_config(config: dict, grid: tuple[int, ...], batch: int, precision: str = "fp32",
                    weight_decay: float = 0.0, device: str = "cuda") -> FNOPlan:
    """The plan of one training step of the FNO described by ``config`` on an unpadded ``grid`` (device "cuda"/"cpu")."""
    return plan_fno(
        int(config["dim"]), int(config["modes"]), int(config["width"]), int(config["layers"]), grid=tuple(grid),
        batch=int(batch), in_channels=int(config["in_channels"]), out_channels=int(config["out_channels"]),
        projection_channels=int(config["projection_channels"]), padding=int(config["padding"]),
        precision=precision, weight_decay=weight_decay, device=device,
    )


def check_fits(plan: FNOPlan | AttentionPlan, device: torch.device | str | None, *, limit: int | None = None, what: str = "training",
               where: str | None = None) -> int:
    """Raise a one-line UserInputError if ``plan`` does not fit; return the memory it was held against.

    ``limit`` (bytes) replaces the device's free memory (the ``--device-memory`` flag);
    the environment variable MUTRANSFER_DEVICE_MEMORY (e.g. "20GiB") does the same for
    every training path of a process tree (Ray workers included).
    """
    if limit is None and os.environ.get("MUTRANSFER_DEVICE_MEMORY"):
        from operators.planning import parse_bytes

        limit = parse_bytes(os.environ["MUTRANSFER_DEVICE_MEMORY"])
        where = "MUTRANSFER_DEVICE_MEMORY"
    if limit is not None:
        memory, where = int(limit), where or "the memory limit set (--device-memory)"
    else:
        memory, where = available_memory(device)
    if plan.fits(memory):
        return memory
    fixes = []
    if plan.activations_bytes is not None:
        best = largest_batch(plan, memory)
        if best:
            fixes.append(f"a batch size of at most {best}")
    if plan.precision == "fp32" and plan.replan(precision="bf16").fits(memory):
        fixes.append("precision bf16")
    fixes.append(plan.smaller)
    raise UserInputError(
        f"{what}: one Adam step of {plan.label} needs {format_bytes(plan.total_bytes)} but {where} is "
        f"{format_bytes(memory)}; use {', or '.join(fixes)}"
    )


def check_model_fits(model, grid: tuple[int, ...], batch: int, device, *, precision: str = "fp32",
                     weight_decay: float = 0.0, limit: int | None = None, what: str = "training",
                     where: str | None = None) -> FNOPlan | AttentionPlan | None:
    """check_fits for a model object or config dict; None (no check) for models the planners do not cover.

    An FNO's config (its keys of ``_FNO_KEYS``), or a point-set adapter's
    (``{"operator": "galerkin", "operator_config": {...}}``, operators.adapters).
    """
    config = model if isinstance(model, dict) else getattr(model, "config", None)
    kind = "cpu" if device is not None and torch.device(device).type == "cpu" else "cuda"
    if is_attention_config(config):
        plan = plan_attention_config(config, grid, batch, precision, weight_decay, kind)
    elif is_fno_config(config):
        plan = plan_for_config(config, grid, batch, precision, weight_decay, kind)
    else:
        return None
    check_fits(plan, device, limit=limit, what=what, where=where)
    return plan


def check_before_building(config: dict, grid: tuple[int, ...], batch: int, device, *, precision: str = "fp32",
                          weight_decay: float = 0.0, limit: int | None = None,
                          what: str = "training") -> FNOPlan | AttentionPlan:
    """The one check every command that builds a model runs first: padding and K against the grid, then memory.

    ``config``: the FNO's keys of ``_FNO_KEYS``, or a point-set adapter's config
    (``{"operator": "galerkin", "operator_config": {width, layers, heads, ...}}``,
    operators.adapters.point_set_config) — plain values from flags or a study; no
    model is built, so a size of 10**9 costs nothing. ``grid``: the unpadded grid of
    one sample (or (P,), the points of a packed point set). Raises a one-line
    UserInputError naming the size and the limit.
    """
    from operators.errors import OperatorConfigError
    from operators.spectral import check_grid

    if is_attention_config(config):
        try:
            plan = plan_attention_config(config, grid, batch, precision, weight_decay,
                                         "cpu" if torch.device(device).type == "cpu" else "cuda")
        except OperatorConfigError as exc:
            raise UserInputError(f"{what}: {exc}") from None
        check_fits(plan, device, limit=limit, what=what)
        return plan
    padding = int(config["padding"])
    check_padding(padding, grid, what)
    padded = tuple(int(n) + padding for n in grid)
    try:
        check_grid(padded, int(config["modes"]))
    except OperatorConfigError as exc:
        raise UserInputError(f"{what}: {exc}") from None
    plan = check_model_fits(config, grid, batch, device, precision=precision, weight_decay=weight_decay, limit=limit,
                            what=what)
    return plan


def check_padding(padding: int, grid: tuple[int, ...], what: str) -> None:
    """Padding only breaks the periodicity: more than the grid itself is never needed (one-line UserInputError)."""
    if padding > min(grid):
        raise UserInputError(f"{what}: padding {padding} is more than the grid {tuple(grid)}; use padding <= {min(grid)}")
