"""What a study's proxy will cost, said before any training (issue "Proxies that pay", item 2).

One line: the proxy's training cost per epoch as a fraction of the target's, from the analytic FLOPs
(mutransfer._sweep.cost.epoch_flops: the planner's count for FNO, a counted forward + backward for the attention
operators) and, when one step of the target takes well under a second or two here, from a measured training
step of each model on this machine; then the μTransfer / direct-tuning cost this study's search should come to.

With S the epochs the search's trials are expected to train (at most N trials x E epochs: ASHA stops trials early,
mutransfer._sweep._asha.expected_search_epochs simulates its rule), E_t target epochs, and p, t the proxy's and the
target's cost per epoch, μTransfer spends S·p + E_t·t where tuning the target directly spends S·t (the same
search on the target, its winner the final model), a ratio of p/t + E_t/S. (Before ASHA was counted the line
used S = N·E, which understated the target's share: 0.22x estimated where 0.31x was measured over 3 seeds on
studies/table1_darcy_cheap_cpu.yaml, docs/results.md.) A proxy costing more than :data:`CHEAP_ENOUGH` of the target per epoch
cannot bring the study near the paper's 0.30×, and the line says which change of the proxy would cheapen it
(advice, not an error). ``--verify``, ``--baseline``, a ladder or top-k add trainings not counted here.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass

import torch

from mutransfer._problems import get_problem
from mutransfer._study import Study
from mutransfer._study.models import build_model
from mutransfer._sweep._asha import expected_search_epochs
from mutransfer._sweep.cost import epoch_flops, model_epoch_flops
from mutransfer._sweep.search import max_concurrent
from mutransfer._training.precision import Precision, training_step
from mutransfer.data._loading import valid_resolutions
from operators.adapters import PackedPointSet
from operators.errors import OperatorConfigError
from operators.parametrization import optimizer_param_groups
from operators.spectral import check_grid

#: per epoch, a proxy dearer than this fraction of the target cannot make the study cheap (the paper's 0.30×)
CHEAP_ENOUGH = 0.3
#: a training step is timed only when one step of the target (forward + backward over a batch) is at most this
#: many FLOPs (about a second on one laptop core); larger models get the analytic estimate alone
MEASURE_MAX_FLOPS = 5e9
#: timed rounds of the measured step (each model once per round, alternating)
ROUNDS = 5


@dataclass(frozen=True)
class ProxyCost:
    """The proxy's and the target's cost per epoch (FLOPs; measured step seconds when timed) and the search's
    size; ``advice``: cheaper proxies this study could use, each with its FLOPs per epoch vs the target's."""

    proxy_epoch_flops: float | None
    target_epoch_flops: float | None
    trials: int
    proxy_epochs: int
    target_epochs: int
    proxy_step_seconds: float | None = None
    target_step_seconds: float | None = None
    advice: tuple[str, ...] = ()
    #: epochs the search's trials are expected to train under ASHA (None: trials x proxy_epochs, none stopped)
    search_epochs: float | None = None

    @property
    def flop_ratio(self) -> float | None:
        """The proxy's FLOPs per epoch / the target's."""
        if not self.proxy_epoch_flops or not self.target_epoch_flops:
            return None
        return self.proxy_epoch_flops / self.target_epoch_flops

    @property
    def time_ratio(self) -> float | None:
        """The proxy's measured step time / the target's (None when not timed)."""
        if not self.proxy_step_seconds or not self.target_step_seconds:
            return None
        return self.proxy_step_seconds / self.target_step_seconds

    @property
    def searched_epochs(self) -> float:
        """S: the search's expected epochs (all N·E when not estimated)."""
        return float(self.search_epochs if self.search_epochs else self.trials * self.proxy_epochs)

    def study_ratio(self, per_epoch: float | None) -> float | None:
        """μTransfer / direct tuning for this search at a proxy/target cost ``per_epoch``: p/t + E_t/S."""
        if per_epoch is None or self.trials < 1 or self.proxy_epochs < 1:
            return None
        return per_epoch + self.target_epochs / self.searched_epochs

    def line(self) -> str:
        """The one line the sweep prints before training."""
        flops, timed = self.flop_ratio, self.time_ratio
        if flops is None:
            return "cost: the proxy's cost per epoch is not known before the data are read (point sets)"
        measured = f", {timed:.2f}x in a measured training step" if timed is not None else ""
        ratio = self.study_ratio(flops)
        timed_ratio = self.study_ratio(timed)
        study = f"{ratio:.2f}x" + (f" ({timed_ratio:.2f}x by the measured step)" if timed_ratio is not None else "")
        text = (
            f"cost: the proxy costs {flops:.2f}x the target per epoch in FLOPs{measured}; this search "
            f"({self.trials} trials x {self.proxy_epochs} epochs{self._stopped()}, target {self.target_epochs} epochs) "
            f"should cost "
            f"about {study} of tuning the target directly"
        )
        if flops > CHEAP_ENOUGH:
            text += f"; above {CHEAP_ENOUGH}x per epoch the proxy cannot pay for itself: " + (
                "; ".join(self.advice) if self.advice else "no cheaper proxy of this study's axes fits its data"
            )
        return text

    def _stopped(self) -> str:
        full = self.trials * self.proxy_epochs
        if self.search_epochs is None or self.search_epochs >= full:
            return ""
        return f", about {self.search_epochs:.0f} once ASHA stops trials early"

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = dataclasses.asdict(self)
        d["advice"] = list(self.advice)
        d.update(flop_ratio=self.flop_ratio, time_ratio=self.time_ratio, study_ratio=self.study_ratio(self.flop_ratio))
        return d


def estimate_proxy_cost(
    study: Study,
    input_shape: tuple[int, ...] | None = None,
    output_channels: int = 1,
    *,
    measure: bool = True,
) -> ProxyCost:
    """The proxy's cost against the target's for ``study`` (``input_shape``: one sample's input tensor shape, the
    data's; None: the problem's grid with one channel). ``measure``: time one training step of each model when
    the target's is small (:data:`MEASURE_MAX_FLOPS`). The epochs ASHA is expected to leave the search are
    simulated at this machine's concurrency (:func:`local_window`)."""
    study = study.sized()
    proxy = model_epoch_flops(study, at_target=False, input_shape=input_shape)
    target = model_epoch_flops(study, at_target=True, input_shape=input_shape)
    timed: tuple[float | None, ...] = (None, None)
    shape = input_shape
    if shape is None and not study.point_problem:
        shape = tuple(n - study.padding for n in study.grid_shape) + (1,)
    n_fit = max(1, int(study.problem.n_fit))
    batch = int(study.training.batch_size)
    if measure and shape is not None and target is not None and batch * target / n_fit <= MEASURE_MAX_FLOPS:
        proxy_shape = shape
        if study.scales_resolution:  # the data strided to the proxy's grid (grid problems only)
            proxy_shape = tuple(n - study.padding for n in study.proxy_grid_shape) + shape[-1:]
        timed = step_seconds(
            study,
            [(study.proxy_modes, study.operator.width, proxy_shape), (study.target_modes, study.target_width, shape)],
            output_channels,
            batch,
        )
    return ProxyCost(
        proxy_epoch_flops=proxy,
        target_epoch_flops=target,
        trials=int(study.trial_count),
        proxy_epochs=int(study.budget.epochs),
        target_epochs=int(study.target.epochs),
        proxy_step_seconds=timed[0],
        target_step_seconds=timed[1],
        advice=tuple(_advice(study, target, input_shape)) if proxy and target and proxy / target > CHEAP_ENOUGH else (),
        search_epochs=expected_search_epochs(study, local_window(study)),
    )


def local_window(study: Study) -> int:
    """The search's concurrency on this machine (the study's value, else what its CPUs hold): the plan's window."""
    return max_concurrent(study, float(os.cpu_count() or 1), 0.0)


def _advice(study: Study, target: float | None, input_shape: tuple[int, ...] | None) -> list[str]:
    """Cheaper proxies along the axes this study's family has, each with its FLOPs per epoch vs the target's:
    a narrower proxy (width-muP carries the hyperparameters to the target's width), a smaller K, a coarser grid
    (FNO: the same weights on any grid with 2K points); only those that cut the proxy's cost per epoch by at least
    a quarter."""
    if not target:
        return []
    res = study.proxy_resolution
    now = epoch_flops(study, study.proxy_K, study.operator.width, input_shape, res) or target
    out = []
    width = int(study.operator.width)
    target_width = int(study.target_width or width)
    if study.family.scales("width") and width >= 8:
        narrow = epoch_flops(study, study.proxy_K, width // 2, input_shape, res)
        if narrow and narrow <= 0.75 * now:
            out.append(
                f"a narrower proxy (operator.width {width // 2}, target_width {target_width}, width-muP): "
                f"{narrow / target:.2f}x"
            )
    k = study.proxy_modes
    if study.family.scales("K") and k is not None and k > 2:
        small = epoch_flops(study, max(2, k // 2), width, input_shape, res)
        if small and small <= 0.75 * now:
            out.append(f"a smaller K (proxy_K {max(2, k // 2)}): {small / target:.2f}x")
    coarse = coarser_resolution(study)
    if coarse is not None:
        cheaper = epoch_flops(study, study.proxy_K, width, input_shape, coarse)
        if cheaper and cheaper <= 0.75 * now:
            out.append(f"a coarser proxy grid (proxy_resolution {coarse}): {cheaper / target:.2f}x")
    return out


def coarser_resolution(study: Study) -> int | None:
    """The finest grid at most half the proxy's that the data stride to and the proxy's K still fits (FNO grid
    problems), or None."""
    modes = study.proxy_modes
    if modes is None or study.point_problem or study.ladder:
        return None
    full = int(study.problem.resolution or 0)
    current = int(study.proxy_resolution or full)
    periodic = get_problem(study.problem.name).periodic
    for res in reversed(valid_resolutions(full, periodic=periodic)):
        if res <= current // 2 + (0 if periodic else 1):
            try:
                check_grid(study.grid_shape_at(res), modes)
            except OperatorConfigError:
                return None
            return res
    return None


def step_seconds(
    study: Study, models: list[tuple[int | None, int | None, tuple[int, ...]]], output_channels: int, batch: int
) -> tuple[float, ...]:
    """Seconds of one Adam training step (forward, backward, step) of the study's model at each (K, width, data
    shape) of ``models``, on random data: one warm-up step each, then :data:`ROUNDS` rounds that alternate the
    models (so a change of the machine's load falls on all of them alike); the median per model."""
    steps = []
    with torch.random.fork_rng():
        torch.manual_seed(0)
        for modes, width, shape in models:
            model = build_model(
                study, modes=modes, width=width, input_channels=int(shape[-1]), output_channels=int(output_channels)
            )
            x = torch.randn(batch, *shape)
            if isinstance(model, PackedPointSet):  # a packed point set's last channel is its mask: every point real
                x[..., -1] = 1.0
            y = torch.randn(batch, *shape[:-1], int(output_channels))
            opt = torch.optim.Adam(optimizer_param_groups(model, 1e-3))
            amp = Precision(study.training.precision, torch.device("cpu"))

            def step(model=model, x=x, y=y, opt=opt, amp=amp) -> float:
                start = time.perf_counter()
                training_step(model, opt, amp, x, y)  # the trainer's step: relative L2, its precision
                return time.perf_counter() - start

            step()  # warm-up
            steps.append(step)
        times: list[list[float]] = [[] for _ in steps]
        for _ in range(ROUNDS):
            for i, step in enumerate(steps):
                times[i].append(step())
    return tuple(float(sorted(t)[len(t) // 2]) for t in times)
