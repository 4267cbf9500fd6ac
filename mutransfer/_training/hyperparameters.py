"""The training hyperparameters, each declared once (default, check, help, flag).

:class:`Hyperparameters` is the single declaration shared by the ``training``
section of study files (mutransfer._study, which adds ``init_scale``), the trainer's
:class:`~mutransfer._training.config.TrainConfig` (which adds the run options) and
the CLI flags of ``mutransfer train``/``transfer`` (mutransfer._config.flags).
:func:`consistency_problem` holds the rules that involve several fields, used by
the study reader and by TrainConfig alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from mutransfer._config.reader import kind_of
from mutransfer._config.settings import fraction, non_negative, positive, setting
from mutransfer._training.pino import LOSSES
from mutransfer._training.schedules import SCHEDULES
from operators.precision import PRECISIONS

#: the largest seed: torch's and HDF5's 64-bit signed integers (a larger one overflowed in torch.manual_seed)
MAX_SEED = 2**63 - 1


def positive_or_off(value: float) -> str | None:
    return None if value > 0 else "must be > 0 (or null for no clipping)"


def warmup_fraction(value: float) -> str | None:
    return None if 0 <= value < 1 else "must be in [0, 1) (a fraction of the budget; 0: no warm-up)"


def read_betas(r, name: str, default):
    """Adam's (β1, β2) from a study file: a list of two numbers in [0, 1)."""
    value = r.raw(name, default)
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        r.fail(r.where(name), f"must be a list of two numbers in [0, 1), got {kind_of(value)}, e.g. [0.9, 0.999]")
    out = []
    for i, v in enumerate(value):
        number = r.as_number(f"{r.where(name)}[{i}]", v, "0.9")
        if not 0 <= number < 1:
            r.fail(f"{r.where(name)}[{i}]", f"must be in [0, 1), got {number:g}, e.g. 0.999")
        out.append(number)
    return out


def read_milestones(r, name: str, default):
    """The step schedule's milestones from a study file: a non-empty list of positive integers, sorted."""
    value = r.raw(name, default)
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        r.fail(r.where(name), f"must be a list of epochs, got {kind_of(value)}, e.g. [100, 150, 200]")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            r.fail(f"{r.where(name)}[{i}]", f"must be a positive integer (an epoch), got {kind_of(v)}")
    return sorted(value)


@dataclass
class Hyperparameters:
    """Optimisation hyperparameters: what a study searches or fixes, and what a training run uses."""

    lr: float = setting(
        1e-3,
        "master learning rate η0 (spectral weights train at c(K)·η0)",
        kind="float",
        check=positive,
        example="1e-3",
    )
    batch_size: int = setting(
        20, "batch size (per optimizer step, all data-parallel workers together)", kind="int", minimum=1, example="20"
    )
    betas: list = setting(help="Adam (β1, β2)", factory=lambda: [0.9, 0.999], read=read_betas, flag="")
    weight_decay: float = setting(0.0, "Adam weight decay", kind="float", check=non_negative, example="0")
    schedule: str = setting(
        "step",
        "LR schedule; step halves at milestones or every step_size (else every budget/5)",
        kind="str",
        choices=tuple(SCHEDULES),
    )
    warmup: float = setting(
        0.0,
        "linear LR warm-up over this fraction of the budget, from 1/steps to the schedule's LR (0: none)",
        kind="float",
        check=warmup_fraction,
        example="0.05",
    )
    milestones: list | None = setting(
        None,
        "step schedule: halve at these epochs (iterations with an iterations budget)",
        read=read_milestones,
        nullable=True,
        flag="",
    )
    step_size: int | None = setting(
        None,
        "step schedule: halve every this many epochs (or iterations)",
        kind="int",
        minimum=1,
        nullable=True,
        example="50",
    )
    gamma: float = setting(0.5, "step schedule factor", kind="float", check=fraction, example="0.5")
    clip_value: float | None = setting(
        None,
        "FNO: element-wise clip of the spectral gradients",
        kind="float",
        check=positive_or_off,
        nullable=True,
        example="0.01",
    )
    seed: int = setting(
        0, "seed of the model's init and the batch order", kind="int", minimum=0, maximum=MAX_SEED, example="0"
    )
    loss: str = setting(
        "relative_l2",
        "training loss: relative_l2, or pino (Darcy: data + PDE residual, 5:1)",
        kind="str",
        choices=tuple(LOSSES),
    )
    data_weight: float | None = setting(
        None,
        "loss pino: weight of the relative L2 data term (default 5)",
        kind="float",
        check=non_negative,
        nullable=True,
        example="5",
        flag="",
    )
    physics_weight: float | None = setting(
        None,
        "loss pino: weight of the PDE residual term (default 1)",
        kind="float",
        check=non_negative,
        nullable=True,
        example="1",
        flag="",
    )
    precision: str = setting(
        "fp32",
        "fp32, or bf16/fp16 mixed precision (autocast for the real-valued layers; FFTs "
        "and the spectral contraction in fp32; fp16 with loss scaling)",
        kind="str",
        choices=tuple(PRECISIONS),
    )


def consistency_problem(h) -> tuple[str, str] | None:
    """(field, problem) for the first rule between fields of ``h`` that fails, else None."""
    if h.loss != "pino" and (h.data_weight is not None or h.physics_weight is not None):
        return (
            "loss",
            f"data_weight/physics_weight apply to loss 'pino' only, not {h.loss!r}; drop them or set loss pino",
        )
    if h.milestones is not None and h.step_size is not None:
        return "step_size", "set at most one of milestones and step_size for the step schedule"
    if (h.milestones is not None or h.step_size is not None) and h.schedule != "step":
        return (
            "schedule",
            f"milestones/step_size only apply to schedule step, not {h.schedule!r}; drop them or use step",
        )
    return None
