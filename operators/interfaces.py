"""The types an operator family's record is made of (operators.family): its model config, planner and plan.

- :data:`ModelConfig`: a model's constructor arguments as a family's ``configure`` gives
  them (an FNO's ``.config``, a point-set adapter's ``{"operator": ..., "operator_config":
  {...}}``): plain values by name, read back with :func:`config_int` where a count is needed;
- :class:`StepPlan`: what a family's plan of one Adam step offers (operators.planning.FNOPlan,
  operators.planning_attention.AttentionPlan, a test's toy plan), what
  mutransfer._training.memory.check_fits reads;
- :class:`Planner`: a family's ``planner``, the plan of a config on samples of shape ``grid``.

No import of the planners' modules at run time: operators.family imports this module, the
planners import operators.family.
"""

from __future__ import annotations

from typing import Protocol, SupportsIndex, SupportsInt, TypeAlias

#: a model's constructor arguments by name (a family's ``configure`` → ``construct``/``planner``/``flops``)
ModelConfig: TypeAlias = dict[str, object]


def config_int(value: object, name: str) -> int:
    """``int(value)`` for the count ``name`` of a config (a TypeError naming it when ``value`` is no number)."""
    if isinstance(value, (str, SupportsInt, SupportsIndex)):
        return int(value)
    raise TypeError(f"{name} {value!r}: must be an integer")


class StepPlan(Protocol):
    """One Adam training step of a model, planned without building it: parameters and peak memory (bytes)."""

    @property
    def precision(self) -> str: ...

    @property
    def total_params(self) -> int: ...

    @property
    def activations_bytes(self) -> int | None: ...

    @property
    def total_bytes(self) -> int: ...

    @property
    def label(self) -> str: ...

    @property
    def smaller(self) -> str: ...

    def fits(self, memory_bytes: int, /) -> bool: ...

    def replan(self, *, batch: int = ..., precision: str = ...) -> StepPlan: ...


class Planner(Protocol):
    """A family's ``planner``: the :class:`StepPlan` of ``config`` on samples of unpadded shape ``grid``."""

    def __call__(
        self,
        config: ModelConfig,
        /,
        *,
        grid: tuple[int, ...],
        batch: int,
        precision: str,
        weight_decay: float,
        device: str,
    ) -> StepPlan: ...
