"""Several trainings of one model shape as one population (operators.population, operators.population_vmap): each member trained as
:func:`mutransfer._training.train` trains it alone, one batched model for all.

The members of a population share everything but their weights, their learning rate and their β1: the
batch size, β2, weight decay, clipping, schedule, budget, seed (so the same batches in the same order: the
trainer's order is a function of the seed and the epoch), loss and precision (:func:`population_key` says
what). Each step runs every member on the batch, sums the members' losses (so each member's gradient is its
own), clips each member's spectral gradients and moves each by Adam at its own LR × the schedule's factor.
Each evaluation measures each member on the held-out split(s); a member whose loss or error blows up is
stopped alone (status ``diverged``), and one its observer stops (ASHA) leaves the population (``stopped``);
the others go on. Member m's trajectory is the one ``train`` gives it alone, to float32 rounding
(tests/training/test_population_training.py).

After each evaluation, each member still training can write its own checkpoint in the trainer's format
(``checkpoints``): the state its solo run would have written there (weights, Adam moments, the schedule's
position, the history), so an interrupted member resumes alone with ``train(..., resume=True)`` where it stopped.

The project's :class:`~operators.fno.FNO` stacks by hand (operators.population.PopulationFNO); any other model
(the attention operators, a user's own) stacks under ``vmap`` (operators.population_vmap.VmapPopulation) where
``vmap`` can batch its forward, which :func:`why_alone` tries once per model class and configuration.

Not here (a trial that needs one trains alone): streamed data, mixed precision, the PINO loss, a model ``vmap``
cannot batch (neuraloperator's FNO, dropout) or with frozen parameters (:func:`why_alone` says why).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from mutransfer._training._schedule_of import schedule_factor, schedule_for
from mutransfer._training.checkpoint import TRAJECTORY_FIELDS, checkpoint_state, save_checkpoint
from mutransfer._training.config import TrainConfig, resolve_device
from mutransfer._training.losses import relative_l2
from mutransfer._training.precision import Precision
from mutransfer._training.records import DIVERGED_METRIC, EpochRecord, TrainResult
from mutransfer._training.trainer import EXPLODED_LOSS, _epoch_permutation
from mutransfer.data._streaming import LazySamples, iterate_batches, iterate_chunks
from operators.parametrization import optimizer_param_groups
from operators.population import PopulationAdam, PopulationFNO, clip_population_spectral_gradients, stackable
from operators.population_vmap import VmapPopulation, vmap_refusal

#: the TrainConfig fields every member of a population shares: those that decide a training's trajectory
#: (the checkpoint's TRAJECTORY_FIELDS) but its learning rate and betas (β1 may differ; β2 is compared on its own),
#: and when it evaluates and where it runs
SHARED_FIELDS = tuple(f for f in TRAJECTORY_FIELDS if f not in ("lr", "betas")) + ("eval_every", "device")


def population_key(config: TrainConfig) -> tuple[object, ...]:
    """What trainings must share to train as one population: :data:`SHARED_FIELDS` and β2."""
    return tuple(str(getattr(config, name)) for name in SHARED_FIELDS) + (float(config.betas[1]),)


#: what :func:`vmap_refusal` said of each model class and configuration tried in this process
_REFUSALS: dict[tuple[object, ...], str | None] = {}


def why_alone(model: torch.nn.Module, config: TrainConfig, data: object) -> str | None:
    """Why this training cannot join a population (one phrase), or None when it can."""
    reason = _why_alone_by_config(config, data)
    if reason is not None or stackable(model):
        return reason
    if any(not p.requires_grad for p in model.parameters()):
        return "its model has parameters that do not train (requires_grad=False)"
    sample: torch.Tensor = data.train_x[:1]  # type: ignore[attr-defined]
    where = next((p.device for p in model.parameters()), torch.device("cpu"))  # the model as built, here
    key = (member_shape(model), tuple(sample.shape), str(where))
    if key not in _REFUSALS:
        _REFUSALS[key] = vmap_refusal(model, sample.to(where))
    refusal = _REFUSALS[key]
    if refusal is None:
        return None
    # a wrapper names the model it wraps: a point set's adapter its ``operator``, neuraloperator's its ``model``
    inner = [
        m for m in (getattr(model, "operator", None), getattr(model, "model", None)) if isinstance(m, torch.nn.Module)
    ]
    return f"its model is a {type(inner[0] if inner else model).__name__}: {refusal}"


def member_shape(model: torch.nn.Module) -> tuple[object, ...]:
    """What members of one population share besides their training: the model's class, configuration and its
    parameters' names and shapes (a searched ``init_scale`` or a searched size makes another population)."""
    config = getattr(model, "config", None)
    named = tuple(sorted((str(k), repr(v)) for k, v in config.items())) if isinstance(config, dict) else ()
    kind = f"{type(model).__module__}.{type(model).__qualname__}"
    return (kind, named, tuple((n, tuple(p.shape)) for n, p in model.named_parameters()))


def _why_alone_by_config(config: TrainConfig, data: object) -> str | None:
    if config.precision != "fp32":
        return f"it trains in {config.precision}"
    if config.loss != "relative_l2":
        return f"its loss is {config.loss}"
    if config.epochs is None:
        return "its budget is in iterations"
    if any(isinstance(getattr(data, name, None), LazySamples) for name in ("train_x", "test_x", "val_x")):
        return "its data is streamed"
    return None


@dataclass(frozen=True)
class Member:
    """One training of a population: its model (built and initialised as the training alone would be) and its
    configuration."""

    model: torch.nn.Module  # an FNO (operators.population.stackable) or any model vmap batches (why_alone)
    config: TrainConfig


#: what the population's observer is told after each evaluation: (member's index in the members given, its
#: record, its share of the population's wall time so far in seconds, the observer's own time included); it
#: returns True to stop that member (ASHA)
OnRecord = Callable[[int, EpochRecord, float], bool]


class _Population:
    """The loop's state: the stacked model, its optimizer, the members still training and their records."""

    def __init__(self, members: Sequence[Member], data: object):
        first = members[0].config
        key = population_key(first)
        for i, member in enumerate(members):
            if population_key(member.config) != key:
                raise ValueError(f"member {i}: its configuration differs from member 0's beyond lr and beta1")
            reason = why_alone(member.model, member.config, data)
            if reason:
                raise ValueError(f"member {i} cannot join a population: {reason}")
        self.config = first
        self.configs = [m.config for m in members]
        self.device = resolve_device(first.device)
        if self.device.type == "cpu":
            torch.set_flush_denormal(True)  # as the trainer
        self.data = data
        self.n_train = int(data.train_x.shape[0])  # type: ignore[attr-defined]
        self.ipe = math.ceil(self.n_train / first.batch_size)
        assert first.epochs is not None
        self.total = first.epochs * self.ipe
        self.eval_interval = first.eval_every * self.ipe
        torch.manual_seed(first.seed)  # as the trainer, after the model is built
        models = [m.model for m in members]
        self.model = (PopulationFNO(models) if stackable(models[0]) else VmapPopulation(models)).to(self.device)
        self.model.train()
        self.base_lr = torch.tensor([m.config.lr for m in members], dtype=torch.float64)
        self.optimizer = PopulationAdam(
            self.model,
            self.base_lr,
            beta1=[m.config.betas[0] for m in members],
            beta2=float(first.betas[1]),
            weight_decay=float(first.weight_decay),
        )
        self.factor = schedule_factor(first, self.total, self.ipe)  # the trainer's LambdaLR factor per iteration
        self.alive = list(range(len(members)))  # indices (in ``members``) of the members still training
        self.results: dict[int, TrainResult] = {}
        self.histories: list[list[EpochRecord]] = [[] for _ in members]
        self.loss_sum = torch.zeros(len(members), dtype=torch.float64)
        self.loss_count = 0
        self.seconds = [0.0] * len(members)  # each member's share of the population's training time
        self.wall = [0.0] * len(members)  # and of its wall time (evaluations and the observer included)
        self.wall_mark = time.perf_counter()
        self.iteration = 0

    # ---- members leaving -------------------------------------------------------------------
    def _accrue_wall(self) -> None:
        """Each member still training takes its share of the wall time since the last mark."""
        now = time.perf_counter()
        if self.alive:
            share = (now - self.wall_mark) / len(self.alive)
            for index in self.alive:
                self.wall[index] += share
        self.wall_mark = now

    def _leave(self, gone: dict[int, str]) -> None:
        """Members ``gone`` (index → status) leave; their results are final (``seconds``: the member's share of
        the population's wall time, up to now)."""
        self._accrue_wall()
        for index, status in gone.items():
            history = self.histories[index]
            diverged = status == "diverged"
            last = history[-1] if history else None
            self.results[index] = TrainResult(
                status=status,
                test_error=DIVERGED_METRIC if diverged or last is None else last.test_error,
                best_test_error=DIVERGED_METRIC if not history else min(r.test_error for r in history),
                train_loss=DIVERGED_METRIC if diverged or last is None else last.train_loss,
                epochs_completed=self.iteration // self.ipe,
                iterations_completed=self.iteration,
                history=list(history),
                device=str(self.device),
                val_error=None if getattr(self.data, "val_x", None) is None else (
                    DIVERGED_METRIC if diverged or last is None else last.val_error
                ),
                trainer_seconds=self.seconds[index],
                seconds=self.wall[index],
            )  # fmt: skip
        keep = [pos for pos, index in enumerate(self.alive) if index not in gone]
        if keep and len(keep) < len(self.alive):
            self.model.keep(keep)
            self.optimizer.keep(keep)
            self.base_lr = self.base_lr[keep]
            self.loss_sum = self.loss_sum[keep]
        self.alive = [self.alive[pos] for pos in keep]

    # ---- a member's checkpoint, as its solo run writes it --------------------------------
    def checkpoint(self, index: int, path: Path) -> None:
        """Member ``index``'s training state to ``path`` in the trainer's checkpoint format: its weights, a
        ``torch.optim.Adam`` over its muP groups holding its moments, its schedule at this iteration."""
        pos = self.alive.index(index)
        config = self.configs[index]
        model = self.model.member(pos)
        groups = [g for g in optimizer_param_groups(model, config.lr, config.weight_decay) if g["params"]]
        betas = (float(config.betas[0]), float(config.betas[1]))
        optimizer = torch.optim.Adam(groups, lr=config.lr, betas=betas, weight_decay=config.weight_decay)
        scheduler = schedule_for(optimizer, config, self.total, self.ipe)
        factor = self.factor(self.iteration)
        for group, base in zip(optimizer.param_groups, scheduler.base_lrs):
            group["lr"] = base * factor
        scheduler.last_epoch = self.iteration
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]  # as LambdaLR.step sets it
        params = dict(model.named_parameters())
        for stacked, name in self.model.stacks:
            moments = self.optimizer.moments(stacked)
            if moments is None:
                continue
            p = params[name]
            optimizer.state[p] = {
                "step": torch.tensor(float(self.optimizer.steps)),
                "exp_avg": moments[0][pos].clone().reshape(p.shape),
                "exp_avg_sq": moments[1][pos].clone().reshape(p.shape),
            }
        history = self.histories[index]
        save_checkpoint(
            checkpoint_state(
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                amp=Precision("fp32", self.device),
                iteration=self.iteration,
                iters_per_epoch=self.ipe,
                status="running",
                history=history,
                best=min((r.test_error for r in history), default=math.inf),
                seconds=self.seconds[index],
                n_train=self.n_train,
                model_config=getattr(model, "config", None),
                config=config,
                device=self.device,
            ),
            path,
        )

    # ---- one step, one evaluation ---------------------------------------------------------
    def _expand(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.device, non_blocking=True).unsqueeze(0).expand(len(self.alive), *x.shape)

    def step(self, xb: torch.Tensor, yb: torch.Tensor) -> None:
        """One optimisation step of every member still training (one that blows up leaves as ``diverged``)."""
        members = len(self.alive)
        x, y = self._expand(xb), self._expand(yb)
        self.optimizer.zero_grad(set_to_none=True)
        pred = self.model(x).float().flatten(0, 1)  # (M·B, *grid, C)
        per_sample = relative_l2(pred, y.reshape(pred.shape), reduction="none")
        losses = per_sample.view(members, -1).mean(dim=1)  # (M,): each member's batch mean, as its trainer's loss
        values = losses.detach().double().cpu()
        bad = [pos for pos in range(members) if not math.isfinite(float(values[pos])) or values[pos] > EXPLODED_LOSS]
        if bad:  # no step for anyone this time: the trainer takes none for a diverged loss, so the others retry
            self._leave({self.alive[pos]: "diverged" for pos in bad})
            if self.alive:
                self.step(xb, yb)
            return
        losses.sum().backward()
        clip_population_spectral_gradients(self.model, self.config.clip_value)
        self.optimizer.lr = self.base_lr * self.factor(self.iteration)
        self.optimizer.step()
        self.iteration += 1
        self.loss_sum += values
        self.loss_count += 1
        finite = torch.stack(
            [torch.isfinite(p.detach().reshape(members, -1)).all(dim=1) for p in self.model.parameters()]
        )
        finite = finite.all(dim=0).cpu()  # (M,): one transfer a step, as the trainer's one check
        if not bool(finite.all()):
            self._leave({self.alive[pos]: "diverged" for pos in range(members) if not finite[pos]})

    def _errors(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """(M,) mean relative L2 of each member still training over (x, y), in batches of the batch size."""
        total = torch.zeros(len(self.alive), dtype=torch.float64)
        self.model.eval()
        with torch.no_grad():
            for xb, yb in iterate_chunks(x, y, self.config.batch_size):
                pred = self.model(self._expand(xb)).float().flatten(0, 1)
                per_sample = relative_l2(pred, self._expand(yb).reshape(pred.shape), reduction="none")
                per_sample = per_sample.view(len(self.alive), -1)
                total += per_sample.sum(dim=1).double().cpu()
        self.model.train()
        return total / x.shape[0]

    def evaluate(self, on_record: OnRecord, since: float, checkpoints: Sequence[Path | None]) -> None:
        """Each member's record; the observer may stop members; one whose error blew up leaves as diverged.
        ``since``: when the training time since the last evaluation began (the evaluation counts, as the
        trainer's clock counts it; the observer does not)."""
        data = self.data
        test = self._errors(data.test_x, data.test_y)  # type: ignore[attr-defined]
        val_x = getattr(data, "val_x", None)
        val = None if val_x is None else self._errors(val_x, data.val_y)  # type: ignore[attr-defined]
        share = (time.perf_counter() - since) / len(self.alive)
        self._accrue_wall()
        train_loss = (self.loss_sum / max(1, self.loss_count)).tolist()
        self.loss_sum.zero_()
        self.loss_count = 0
        lr_now = (self.base_lr * self.factor(self.iteration)).tolist()
        gone: dict[int, str] = {}
        for pos, index in enumerate(self.alive):
            self.seconds[index] += share
            error = float(test[pos])
            if not math.isfinite(error) or error > EXPLODED_LOSS:
                gone[index] = "diverged"
                continue
            record = EpochRecord(
                epoch=self.iteration // self.ipe,
                iteration=self.iteration,
                train_loss=float(train_loss[pos]),
                test_error=error,
                lr=float(lr_now[pos]),
                seconds=self.seconds[index],
                val_error=None if val is None else float(val[pos]),
            )
            self.histories[index].append(record)
            path = checkpoints[index]
            if path is not None and self.iteration < self.total:  # before the report, as the trainer's
                self.checkpoint(index, path)
            if on_record(index, record, self.wall[index]):
                gone[index] = "stopped"
        if gone:
            self._leave(gone)


def train_population(
    members: Sequence[Member],
    data: object,
    on_record: OnRecord,
    checkpoints: Sequence[Path | None] | None = None,
) -> list[TrainResult]:
    """Train ``members`` as one population on ``data`` (``train_x, train_y, test_x, test_y`` and optionally
    ``val_x, val_y``, tensors (n, *grid, C) in memory); ``on_record(i, record, wall)`` after each evaluation of
    member i, True to stop it; ``checkpoints[i]``: where member i's checkpoint is written after each evaluation
    before the last (None: nowhere). Returns each member's :class:`TrainResult`, in the order given
    (``trainer_seconds``: its share of the population's training time; ``seconds``: of its wall time). Raises
    ValueError for members that cannot train together (:func:`population_key`, :func:`why_alone`)."""
    if not members:
        return []
    paths = list(checkpoints) if checkpoints is not None else [None] * len(members)
    run = _Population(members, data)
    data_x, data_y = data.train_x, data.train_y  # type: ignore[attr-defined]
    since = time.perf_counter()
    while run.alive and run.iteration < run.total:
        order = _epoch_permutation(run.n_train, run.config.seed, run.iteration // run.ipe)
        for xb, yb in iterate_batches(data_x, data_y, order, run.config.batch_size, run.iteration % run.ipe):
            if run.iteration >= run.total or not run.alive:
                break
            run.step(xb, yb)
            if run.alive and (run.iteration % run.eval_interval == 0 or run.iteration == run.total):
                run.evaluate(on_record, since, paths)
                since = time.perf_counter()
    run._leave({index: "completed" for index in run.alive})
    return [run.results[i] for i in range(len(members))]
