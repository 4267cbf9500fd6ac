"""A search distribution of the ``search_space`` section, and Optuna's distribution for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Distribution:
    """A search distribution: loguniform/uniform (low, high), int (integers low..high) or choice (values)."""

    type: str
    low: float | None = None
    high: float | None = None
    values: list | None = None

    def to_dict(self) -> dict:
        if self.type == "choice":
            return {"type": "choice", "values": list(self.values or [])}
        return {"type": self.type, "low": self.low, "high": self.high}

    def candidates(self) -> list:
        """The values a study's checks try: a choice's values, an int range's every integer, a float range's ends."""
        if self.type == "choice":
            return list(self.values or [])
        if self.type == "int":
            return list(range(int(self.low or 0), int(self.high or 0) + 1))
        return [self.low, self.high]

    @classmethod
    def from_dict(cls, d: dict) -> Distribution:
        """The inverse of :meth:`to_dict` (a study folder's study.yaml, read back)."""
        if d.get("type") == "choice":
            return cls("choice", values=list(d["values"]))
        return cls(str(d["type"]), low=d["low"], high=d["high"])

    def to_optuna(self):
        """Optuna's distribution: a ``choice`` categorical, an ``int`` range an integer one, a range a float one
        (log-scaled for ``loguniform``)."""
        from optuna.distributions import (  # noqa: PLC0415 -- deferred: Optuna only where a search samples or plots
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.type == "choice":
            return CategoricalDistribution(list(self.values or []))
        if self.type == "int":
            return IntDistribution(int(self.low or 0), int(self.high or 0))
        return FloatDistribution(float(self.low or 0.0), float(self.high or 0.0), log=self.type == "loguniform")
