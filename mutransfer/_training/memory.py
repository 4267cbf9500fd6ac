"""Check that one training step of a model fits the device *before* anything is allocated.

The estimate is the model's family's plan (operators.registry): :func:`operators.planning.plan_fno` for an FNO (counts by arithmetic,
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

from mutransfer.data._streaming import available_memory as ram_available
from mutransfer.errors import UserInputError
from operators.errors import OperatorConfigError
from operators.interfaces import StepPlan
from operators.planning import format_bytes, largest_batch, parse_bytes
from operators.registry import family_of_config


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
    available = ram_available()
    if available is None:
        raise UserInputError("the available RAM cannot be read on this system; pass --device-memory SIZE")
    return available


def check_fits(
    plan: StepPlan,
    device: torch.device | str | None,
    *,
    limit: int | None = None,
    what: str = "training",
    where: str | None = None,
) -> int:
    """Raise a one-line UserInputError if ``plan`` does not fit; return the memory it was held against.

    ``limit`` (bytes) replaces the device's free memory (the ``--device-memory`` flag);
    the environment variable MUTRANSFER_DEVICE_MEMORY (e.g. "20GiB") does the same for
    every training path of a process tree (Ray workers included).
    """
    if limit is None and os.environ.get("MUTRANSFER_DEVICE_MEMORY"):
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
    bf16 = plan.replan(precision="bf16") if plan.precision == "fp32" else None
    # not where bf16 would drop the activations the fp32 plan counts (a factory's are measured in fp32 only)
    if (
        bf16 is not None
        and bf16.fits(memory)
        and (bf16.activations_bytes is not None or plan.activations_bytes is None)
    ):
        fixes.append("precision bf16")
    fixes.append(plan.smaller)
    raise UserInputError(
        f"{what}: one Adam step of {plan.label} needs {format_bytes(plan.total_bytes)} but {where} is "
        f"{format_bytes(memory)}; use {', or '.join(fixes)}"
    )


def check_model_fits(
    model,
    grid: tuple[int, ...],
    batch: int,
    device,
    *,
    precision: str = "fp32",
    weight_decay: float = 0.0,
    limit: int | None = None,
    what: str = "training",
    where: str | None = None,
) -> StepPlan | None:
    """check_fits for a model object or config dict; None (no check) for models no registered family owns.

    The family that owns the config (operators.registry: ``owns``) plans it: an FNO's
    ``.config``, a point-set adapter's (``{"operator": "galerkin", "operator_config": {...}}``).
    """
    config = model if isinstance(model, dict) else getattr(model, "config", None)
    family = family_of_config(config)
    if family is None or not isinstance(config, dict):
        return None
    kind = "cpu" if device is not None and torch.device(device).type == "cpu" else "cuda"
    plan = family.plan(config, grid=grid, batch=batch, precision=precision, weight_decay=weight_decay, device=kind)
    check_fits(plan, device, limit=limit, what=what, where=where)
    return plan


def check_before_building(
    config: dict,
    grid: tuple[int, ...],
    batch: int,
    device,
    *,
    precision: str = "fp32",
    weight_decay: float = 0.0,
    limit: int | None = None,
    what: str = "training",
) -> StepPlan:
    """The one check every command that builds a model runs first: padding and K against the grid, then memory.

    ``config``: a model's config as its family's ``configure`` gives it (operators.registry)
    — plain values from flags or a study; no model is built, so a size of 10**9 costs
    nothing. ``grid``: the unpadded grid of one sample (or (P,), the points of a packed
    point set). Raises a one-line UserInputError naming the size and the limit.
    """
    if config.get("padding") is not None:
        check_padding(int(config["padding"]), grid, what)
    family = family_of_config(config)
    if family is None:
        raise UserInputError(f"{what}: no registered operator family owns this model config")
    kind = "cpu" if torch.device(device).type == "cpu" else "cuda"
    try:
        plan = family.plan(config, grid=grid, batch=batch, precision=precision, weight_decay=weight_decay, device=kind)
    except OperatorConfigError as exc:
        raise UserInputError(f"{what}: {exc}") from None
    check_fits(plan, device, limit=limit, what=what)
    return plan


def check_padding(padding: int, grid: tuple[int, ...], what: str) -> None:
    """Padding only breaks the periodicity: more than the grid itself is never needed (one-line UserInputError)."""
    if padding > min(grid):
        raise UserInputError(
            f"{what}: padding {padding} is more than the grid {tuple(grid)}; use padding <= {min(grid)}"
        )
