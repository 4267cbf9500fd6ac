"""Refuse a study whose proxy or target cannot fit its device, before Ray starts or data is loaded.

The proxies are planned at the largest batch size the search may pick, the target at its
per-worker batch (batch_size // num_workers), both at ``training.precision``: an FNO with
:func:`operators.planning.plan_fno` (exact), an attention operator (Galerkin, ONO, GNOT)
on a grid problem with :func:`operators.planning_attention.plan_attention` (exact
parameters, activations within 20 % of the measured peak; points = the grid's nodes,
one input channel assumed). The memory they are held against, on this machine
(no ``--address``):

- a proxy trial on a GPU: the GPU's free memory × ``resources.gpus_per_trial`` (trials
  share GPUs in those fractions); on the CPU: the available RAM / the number of trials
  that run at once;
- a target worker on a GPU: one GPU's free memory; on the CPU: the available RAM /
  ``target.num_workers``.

On a cluster (``--address``) the driver cannot see the workers' devices; each trial and
the target check themselves in the trainer before moving the model to the device. A
point-set problem's point count is known only once its file is read, so its attention
operators are checked by the trainer too (in each trial, before the optimizer exists).
:func:`check_study_padding` (FNO padding against the grid) runs with or without
``--address``.
"""

from __future__ import annotations

import os

from mutransfer._study import Study
from mutransfer._study.models import model_spec
from mutransfer._study.search_space import trial_study
from mutransfer._training.memory import available_memory, check_fits, check_padding
from mutransfer.errors import UserInputError
from operators.planning import FNOPlan
from operators.planning_attention import AttentionPlan


def _largest_searched(study: Study, name: str, fixed):
    dist = study.search_space.get(name)
    if dist is None:
        return fixed
    if dist.type == "choice":
        return max(dist.values)
    return dist.high


def _plan(
    study: Study,
    modes: int | None,
    width: int,
    batch: int,
    device: str = "cuda",
    *,
    proxy_grid: bool = False,
    channels: tuple[int, int] = (1, 1),
):
    """The family's plan of one training step at ``modes`` K (families with the K axis) and ``width``, on the
    target's grid (``proxy_grid``: the proxy's, ``proxy_resolution``), for data of ``channels`` (input, output)
    channels."""
    shape = study.proxy_grid_shape if proxy_grid else study.grid_shape
    grid = tuple(n - study.padding for n in shape)  # grid_shape includes the padding
    study = study.sized()  # the K rule's exponent may not be measured yet; it changes no size
    return study.family.plan(
        model_spec(study, modes=modes, width=width, input_channels=channels[0], output_channels=channels[1]),
        grid=grid,
        batch=int(batch),
        precision=study.training.precision,
        weight_decay=float(_largest_searched(study, "weight_decay", study.training.weight_decay)),
        device=device,
    )


#: a family's plan of one training step (operators.family.OperatorFamily.plan)
Plan = FNOPlan | AttentionPlan


def plan_step(
    study: Study, *, target: bool, device: str, workers: int = 1, channels: tuple[int, int] = (1, 1)
) -> Plan | None:
    """The memory plan of one training step of the proxy (``target=False``) or the target model.

    Made once per model by the sweep's driver and carried to the workers that train it
    (mutransfer._sweep.session.Prepared.memory_plan), who hold it against their device
    instead of planning again. Planned at the largest batch the search may pick, split over
    ``workers`` (the target's Ray Train workers), and the largest searched weight decay: an
    upper bound for every trial. ``channels``: the data's (input, output) channels (1 and 1 for
    the generated problems; a data file's once it is read). None for a point-set problem (its point
    count is known only once the file is read; the trainer plans those itself).
    """
    if study.point_problem:
        return None
    searched = ("operator.layers", "operator.projection_channels", "operator.width", "proxy_K")
    largest = {k: _largest_searched(study, k, None) for k in searched}
    study = trial_study(study, {k: v for k, v in largest.items() if v is not None})  # the largest model searched
    batch = int(_largest_searched(study, "batch_size", study.training.batch_size))
    if target:
        width = study.target_width or study.operator.width
        return _plan(study, study.target_modes, width, max(1, batch // workers), device, channels=channels)
    return _plan(study, study.proxy_modes, study.operator.width, batch, device, proxy_grid=True, channels=channels)


def _device_limit(gpu: bool, share: float, divide: int, gpu_text: str, cpu_text: str) -> tuple[int | None, str | None]:
    """(bytes, description) a trial or worker may use here; (None, None) when MUTRANSFER_DEVICE_MEMORY sets it."""
    if os.environ.get("MUTRANSFER_DEVICE_MEMORY"):
        return None, None
    if gpu:
        return int(available_memory("cuda:0")[0] * min(1.0, share)), gpu_text
    return available_memory("cpu")[0] // max(1, divide), cpu_text


def local_devices(study: Study, gpus: int) -> tuple[str, str]:
    """The device kinds ("cuda" or "cpu") a proxy trial and a target worker train on, on a machine with ``gpus`` GPUs."""
    r, t = study.resources, study.target
    proxy_gpu = r.gpus_per_trial > 0 and gpus > 0
    target_gpu = t.use_gpu is True or (t.use_gpu == "auto" and gpus >= 1)
    return ("cuda" if proxy_gpu else "cpu"), ("cuda" if target_gpu else "cpu")


def check_study_memory(
    study: Study, concurrency: int, *, gpus: int, plans: tuple[Plan | None, Plan | None] | None = None
) -> None:
    """Raise a one-line UserInputError if a proxy trial or a target worker cannot fit its device here.

    ``plans``: the proxy's and the target's :func:`plan_step` plans when the caller made them
    already (the sweep's driver, which carries them to the workers); else they are made here
    for this machine's devices. A None plan (a point-set problem) is not checked here.
    """
    r, t = study.resources, study.target
    proxy_device, target_device = local_devices(study, gpus)
    if plans is None:
        plans = (
            plan_step(study, target=False, device=proxy_device),
            plan_step(study, target=True, device=target_device, workers=t.num_workers),
        )
    proxy, target = plans
    if proxy is not None:
        limit, where = _device_limit(
            proxy_device == "cuda",
            r.gpus_per_trial,
            concurrency,
            f"a {r.gpus_per_trial:g}-GPU share of cuda:0's free memory",
            f"the available RAM / {concurrency} trials at once",
        )
        check_fits(proxy, None, limit=limit, where=where, what="proxy trial (resources, search_space.batch_size)")
    if target is not None:
        limit, where = _device_limit(
            target_device == "cuda",
            1.0,
            t.num_workers,
            "cuda:0's free memory",
            f"the available RAM / {t.num_workers} target workers",
        )
        try:
            check_fits(target, None, limit=limit, where=where, what="target (target_K, target_width)")
        except UserInputError as exc:
            raise UserInputError(f"{exc}, or more target.num_workers") from None


def check_grid_point_memory(study: Study, *, modes: int, width: int, batch: int, concurrency: int) -> None:
    """A landscape's largest point (FNO at ``modes``, or any operator at ``width``, ``batch``) must fit the RAM / ``concurrency``."""
    if study.point_problem:
        return
    limit, where = _device_limit(False, 1.0, concurrency, "", f"the available RAM / {concurrency} tasks at once")
    check_fits(
        _plan(study, modes, width, batch, "cpu"),
        None,
        limit=limit,
        where=where,
        what="landscape point (the largest K/width of the grid)",
    )


def check_target_size_memory(study: Study, concurrency: int, *, channels: tuple[int, int] = (1, 1)) -> None:
    """``--verify`` / ``--baseline direct`` train target-size models, ``concurrency`` at once: each must fit RAM /
    concurrency (``channels``: the data's, as :func:`plan_step`'s)."""
    if study.point_problem:
        return
    limit, where = _device_limit(False, 1.0, concurrency, "", f"the available RAM / {concurrency} trainings at once")
    plan = plan_step(study, target=True, device="cpu", channels=channels)
    assert plan is not None  # a grid problem
    check_fits(
        plan,
        None,
        limit=limit,
        where=where,
        what="target-size training of --verify / --baseline direct",
    )


def check_study_padding(study: Study) -> None:
    """An FNO study's padding must not exceed its grid (as for `train`): one-line UserInputError naming operator.padding."""
    if "padding" not in study.family.fields or study.point_problem:
        return
    grid = tuple(n - study.padding for n in study.grid_shape)  # grid_shape includes the padding
    check_padding(study.padding, grid, "operator.padding")
