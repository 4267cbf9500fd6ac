"""Learning-rate schedules, stepped once per optimizer iteration.

Each schedule is a pure function ``iteration -> factor`` (:func:`schedule_function`); the trainer
wraps it in a :class:`torch.optim.lr_scheduler.LambdaLR` (mutransfer._training._schedule_of), which multiplies every
param group's base LR by the same factor. The muP ratio between the spectral
group and the rest therefore holds at every step, and the scheduler's
state_dict (just counters and base LRs) round-trips through a checkpoint.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Sequence

from mutransfer.errors import UserInputError

SCHEDULES = ("step", "onecycle", "cosine", "constant")

#: OneCycleLR defaults: start at lr/DIV_FACTOR, end at lr/(DIV_FACTOR·FINAL_DIV_FACTOR).
DIV_FACTOR = 25.0
FINAL_DIV_FACTOR = 1e4


def constant(iteration: int) -> float:
    """Factor 1 at every iteration."""
    return 1.0


def step(
    iteration: int,
    *,
    milestones: Sequence[int] | None = None,
    step_size: int | None = None,
    gamma: float = 0.5,
) -> float:
    """Multiply by ``gamma`` at each milestone (sorted iterations), or every ``step_size`` iterations."""
    if milestones is not None:
        return gamma ** bisect.bisect_right(milestones, iteration)
    if step_size is not None:
        return gamma ** (iteration // step_size)
    return 1.0


def _cos_interp(start: float, end: float, fraction: float) -> float:
    """Cosine interpolation from ``start`` (fraction 0) to ``end`` (fraction 1)."""
    return end + (start - end) * (1.0 + math.cos(math.pi * fraction)) / 2.0


def cosine(iteration: int, total_iterations: int, *, min_factor: float = 0.0) -> float:
    """Cosine annealing from 1 at iteration 0 to ``min_factor`` at ``total_iterations`` (held after)."""
    fraction = min(iteration, total_iterations) / total_iterations
    return _cos_interp(1.0, min_factor, fraction)


def onecycle(
    iteration: int,
    total_iterations: int,
    *,
    pct_start: float = 0.3,
    div_factor: float = DIV_FACTOR,
    final_div_factor: float = FINAL_DIV_FACTOR,
) -> float:
    """One-cycle (OneCycleLR's LR curve, cosine, no momentum cycling).

    Warms up from 1/div_factor to 1 at iteration round(pct_start·total), then
    anneals to 1/(div_factor·final_div_factor) at ``total_iterations``.
    """
    peak = min(max(1, round(pct_start * total_iterations)), total_iterations)
    start = 1.0 / div_factor
    if iteration < peak:
        return _cos_interp(start, 1.0, iteration / peak)
    if peak >= total_iterations:
        return 1.0
    fraction = min(iteration - peak, total_iterations - peak) / (total_iterations - peak)
    return _cos_interp(1.0, start / final_div_factor, fraction)


def _check_positive_int(name: str, value, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserInputError(f"{name} {value!r}: must be a positive integer; {fix}")
    return value


def schedule_function(
    name: str,
    total_iterations: int,
    *,
    milestones: Sequence[int] | None = None,
    step_size: int | None = None,
    gamma: float = 0.5,
    pct_start: float = 0.3,
    min_factor: float = 0.0,
    warmup: float = 0.0,
) -> Callable[[int], float]:
    """The schedule ``iteration -> factor`` applied to every param group's base LR.

    ``milestones`` and ``step_size`` are in iterations (``step`` only; at most one of them; with neither, the LR
    halves every ``total_iterations // 5``). ``min_factor`` is cosine's final LR as a fraction of each group's base
    LR. ``warmup``: the fraction of ``total_iterations`` over which the LR rises linearly to the schedule's (0: none).
    The trainer wraps it in a LambdaLR; a population of trainings (mutransfer._training._population) scales each
    member's LR by it."""
    if name not in SCHEDULES:
        raise UserInputError(f"schedule {name!r} is unknown; use one of: {', '.join(SCHEDULES)}")
    total = _check_positive_int("total_iterations", total_iterations, "train for at least one iteration")
    if name == "step":
        if milestones is not None and step_size is not None:
            raise UserInputError("milestones and step_size are both set; give only one of them for the step schedule")
        if not (isinstance(gamma, (int, float)) and 0 < gamma <= 1):
            raise UserInputError(f"gamma {gamma!r}: must be in (0, 1], e.g. 0.5 to halve the LR at each step")
        if milestones is not None:
            ms = sorted(
                _check_positive_int("milestones", m, "give milestones as positive iteration/epoch counts")
                for m in milestones
            )
            fn = lambda it, ms=ms, g=float(gamma): step(it, milestones=ms, gamma=g)  # noqa: E731
        else:
            size = (
                max(1, total // 5)
                if step_size is None
                else _check_positive_int(
                    "step_size", step_size, "give the number of iterations/epochs between LR decays"
                )
            )
            fn = lambda it, size=size, g=float(gamma): step(it, step_size=size, gamma=g)  # noqa: E731
    elif name == "onecycle":
        if not (isinstance(pct_start, (int, float)) and 0 < pct_start < 1):
            raise UserInputError(f"pct_start {pct_start!r}: the warm-up fraction must be in (0, 1), e.g. 0.3")
        fn = lambda it, p=float(pct_start): onecycle(it, total, pct_start=p)  # noqa: E731
    elif name == "cosine":
        if not (isinstance(min_factor, (int, float)) and 0 <= min_factor <= 1):
            raise UserInputError(f"min_factor {min_factor!r}: cosine's final LR fraction must be in [0, 1]")
        fn = lambda it, m=float(min_factor): cosine(it, total, min_factor=m)  # noqa: E731
    else:
        fn = constant
    if not (isinstance(warmup, (int, float)) and 0 <= warmup < 1):
        raise UserInputError(f"warmup {warmup!r}: the warm-up fraction of the budget must be in [0, 1), e.g. 0.05")
    if warmup > 0:
        return functools.partial(warmed_up, fn, max(1, round(warmup * total)))
    return fn


def warmed_up(schedule: Callable[[int], float], warmup_iterations: int, iteration: int) -> float:
    """``schedule`` times a linear warm-up: factor (iteration + 1) / warmup_iterations until it reaches 1.

    The first step trains at 1/warmup_iterations of the LR (not 0, which would waste it); the schedule itself
    runs on the same clock, so a cosine still reaches its end at the budget's end."""
    return schedule(iteration) * min(1.0, (iteration + 1) / warmup_iterations)
