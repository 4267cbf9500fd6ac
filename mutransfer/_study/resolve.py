"""Checks and defaults of a study that involve several fields, the problem or the data file.

Run after every section was read (mutransfer._study.files.parse_study): fills the
problem's defaults (resolution, split, time resolution, target width, width rule)
and fails with one line, naming the field, on what cannot work (K too large for the
training grid, a resolution the data cannot be strided to, an operator that cannot
take the problem's data, …). Asks the operator registry (operators.registry) and the
problem registry (mutransfer._problems) rather than comparing names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mutransfer._config.reader import Reader
from mutransfer._problems import get_problem
from mutransfer._study.k_exponent import K_EXPONENT_FROM_DATA
from mutransfer._study.ladder import check_ladder
from mutransfer._study.samplers import sampler_problem, single_objective
from mutransfer._study.schema import Study
from mutransfer._study.search_space import OPTIONS_PREFIX, SIZE_KEYS, trial_study
from mutransfer.data._loading import valid_resolutions
from mutransfer.data._pointclouds import is_point_file, point_file_header
from mutransfer.data._readers import open_data
from mutransfer.errors import UserInputError
from operators.errors import OperatorConfigError
from operators.family import OperatorFamily
from operators.parametrization import check_modes
from operators.planning_attention import plan_attention
from operators.registry import point_set_families
from operators.spectral import check_grid


def resolve_and_check(study: Study, r: Reader) -> None:
    """Fill problem defaults (resolution, split) and check what depends on several fields."""

    problem = get_problem(study.problem.name)
    if not study.family.takes(problem.kind):
        r.fail(
            "operator.type",
            f"{study.operator.type} needs a grid, and {problem.name!r} is a point-set (irregular mesh) problem; "
            f"use one of: {', '.join(point_set_families())}",
        )
    _resolve_width(study, r)

    check_ladder(study, r)
    check_top_k(study, r)
    if problem.kind == "points":
        _resolve_points_problem(study, problem, r)
        _resolve_validation(study.problem, r)
        check_searched_sizes(study, r)
        return
    _resolve_grid_problem(study, problem, r)
    _resolve_validation(study.problem, r)
    if study.family.scales("K"):
        _check_modes(study, r)
    check_search_algorithm(study, r)
    check_searched_sizes(study, r)


def _resolve_grid_problem(study: Study, problem, r: Reader) -> None:
    p = study.problem
    if study.training.loss not in problem.losses:
        r.fail(
            "training.loss",
            f"{study.training.loss} is not a loss of {problem.name!r} (pino is the Darcy physics "
            f"loss); use one of: {', '.join(problem.losses)}",
        )
    searched_loss = study.search_space.get("loss")
    for i, loss in enumerate((searched_loss.values or []) if searched_loss else []):
        if loss not in problem.losses:
            r.fail(
                f"search_space.loss.values[{i}]",
                f"{loss} is not a loss of {problem.name!r}; use one of: {', '.join(problem.losses)}",
            )
    timed = problem.time_resolution is not None
    if p.time_resolution is not None and not timed:
        r.fail("problem.time_resolution", f"only applies to space-time problems, not {problem.name!r}; remove it")
    if timed and p.time_resolution is None:
        p.time_resolution = int(problem.time_resolution)
    if p.data is not None:
        _ignore_generated_resolution(study)
        native, n_available, file_problem = _data_header(p.data, r)
        if file_problem not in (None, problem.name):
            r.fail(
                "problem.data", f"{p.data} holds {file_problem!r} data, not {problem.name!r}; fix problem.name or data"
            )
        _resolve_file_split(p, n_available, r)
    else:
        native = p.generated_resolution or problem.generated_resolution
        p.generated_resolution = native
        p.n_train = problem.n_train if p.n_train is None else p.n_train
        p.n_test = problem.n_test if p.n_test is None else p.n_test
    if p.resolution is None:
        p.resolution = problem.resolution if p.data is None and native >= problem.resolution else native
    valid = valid_resolutions(native, periodic=problem.periodic)
    if p.resolution not in valid:
        near = [v for v in valid if v <= native]
        best = min(near, key=lambda v: abs(v - p.resolution)) if near else native
        rule = "divide" if problem.periodic else "have (N-1) divide"
        r.fail(
            "problem.resolution",
            f"{p.resolution} cannot be strided from data at resolution {native} (it must {rule} it); use e.g. {best}",
        )


def _ignore_generated_resolution(study: Study) -> None:
    """``problem.generated_resolution`` with ``problem.data`` set (a shipped study copied and pointed at a file):
    ignored, with a note, rather than refused: it sizes generated data only."""
    p = study.problem
    if p.generated_resolution is not None:
        study.notes += (
            f"problem.generated_resolution {p.generated_resolution} applies to generated data only "
            f"(data: null); ignored for problem.data {p.data}",
        )
        p.generated_resolution = None


def _resolve_width(study: Study, r: Reader) -> None:
    """target_width and width_parametrization defaults; the proxy must not be wider than the target."""
    o = study.operator
    if study.target_width is None:
        study.target_width = o.width
    if study.target_width < o.width:
        r.fail(
            "target_width",
            f"must be >= operator.width ({o.width}): operator.width is the proxy's width, e.g. target_width: {4 * o.width}",
        )
    if study.width_parametrization is None:
        study.width_parametrization = "mup" if study.scales_width else "standard"
    if study.family.axes == ("width",) and not study.scales_width:
        r.fail(
            "target_width",
            f"{o.type} scales in width only: set target_width > operator.width ({o.width}), e.g. target_width: {4 * o.width}",
        )
    if "heads" in study.family.fields:
        for key, width in (("operator.width", o.width), ("target_width", study.target_width)):
            if width % o.heads:
                r.fail(key, f"{width} is not divisible by operator.heads {o.heads}; use a multiple of {o.heads}")
        _check_operator_options(study, r)
        _check_searched_operator(study, r)


def check_searched_sizes(study: Study, r: Reader) -> None:
    """A searched proxy size (``proxy_K``, ``operator.width``) only where a transfer rule covers it (muP in K, the
    width rule under width-muP), without a ladder (which sizes the proxies itself) or a K exponent measured between
    two fixed K; each value a proxy the target is larger than, and that fits the grid (K) or the heads (width)."""
    for key in (k for k in SIZE_KEYS if k in study.search_space):
        dist = study.search_space[key]
        where = f"search_space.{key}"
        if study.ladder is not None:
            r.fail(where, "a ladder sizes the proxies itself; search the size or climb a ladder, not both")
        if key == "proxy_K" and not (study.family.scales("K") and study.parametrization == "mup"):
            r.fail(where, "the K rule covers the proxy's K under parametrization: mup of an FNO; set proxy_K instead")
        if key == "proxy_K" and study.operator.k_exponent == K_EXPONENT_FROM_DATA:
            r.fail(where, "operator.k_exponent: data is measured between one proxy_K and target_K; give a number")
        if key == "operator.width" and not (study.scales_width and study.width_parametrization == "mup"):
            r.fail(where, "the width rule covers the proxy's width under width-muP: set target_width > operator.width")
        drawable = dist.candidates()
        for value in drawable:
            problem = _size_problem(study, key, int(value))
            if problem:
                r.fail(where, f"can draw {value}: {problem}")


def _size_problem(study: Study, key: str, value: int) -> str | None:
    """Why a proxy of searched size ``value`` cannot be trained and transferred from (None: it can)."""
    if key == "operator.width":
        if value >= int(study.target_width or 0):
            return f"a proxy must be narrower than target_width ({study.target_width}); keep the range below it"
        heads = study.operator.heads
        return f"not divisible by operator.heads {heads}" if heads and value % heads else None
    same_k_scales = study.scales_width or study.scales_resolution  # equal K is a smaller proxy in width or grid
    if value > int(study.target_K or 0) or (value == study.target_K and not same_k_scales):
        return f"a proxy must have fewer modes than target_K ({study.target_K}); keep the range below it"
    try:
        check_modes(value, study.dim, study.parametrization)
        check_grid(study.proxy_grid_shape, value)
    except OperatorConfigError as exc:
        return str(exc)
    return None


def _check_searched_operator(study: Study, r: Reader) -> None:
    """Each searched value of ``operator.heads`` and of an ``operator.options.<key>`` checked as a fixed one would be:
    heads dividing both widths, the operator built once with the option (so a value the family refuses fails now)."""
    for key, dist in study.search_space.items():
        if key != "operator.heads" and not key.startswith(OPTIONS_PREFIX):
            continue
        drawable = dist.candidates()
        for i, value in enumerate(drawable):
            where = f"search_space.{key}" + (f".values[{i}]" if dist.type == "choice" else "")
            drawn = trial_study(study, {key: value})
            widths = (study.operator.width, study.target_width)
            if key == "operator.heads" and any(w % value for w in widths):
                r.fail(where, f"heads {value} does not divide the widths {widths[0]} and {widths[1]}; use a divisor")
            try:
                _check_operator_options(drawn, r)
            except UserInputError as exc:
                r.fail(where, f"{value!r}: {str(exc).split(': ', 2)[-1]}")


def _check_operator_options(study: Study, r: Reader) -> None:
    """A wrong ``operator.options`` entry fails now, with its field path (:func:`check_operator_options`)."""

    o = study.operator
    try:
        check_operator_options(study.family, get_problem(study.problem.name).dim, o.heads, o.options)
    except OperatorConfigError as exc:
        r.fail("operator.options", f"{exc}")


def check_operator_options(family: OperatorFamily, dim: int, heads: int | None, options: Mapping[str, object]) -> None:
    """Build a one-layer operator of width ``heads`` once (cheap) so that a wrong option raises
    :class:`OperatorConfigError` before any data is made or read.

    The widths and depth are checked against the memory later (mutransfer._study.memory);
    options that are sizes (eigenfunctions, experts, ...) are planned first and the
    model is built only when it holds at most 10**7 parameters.
    """
    config = dict(coord_dim=dim, in_channels=1, out_channels=1, width=heads, layers=1, heads=heads, **options)
    if family.attention_formula is None or plan_attention(family.name, config, points=1).total_params <= 10**7:
        family.make(config)


def _resolve_validation(p, r: Reader) -> None:
    """n_val: default n_train // 5 (at least 1); it must leave at least one training sample.

    A study folder made before validation splits carries ``n_val = 0`` (set by
    ``mutransfer._study_folder.portable.read_study_file``, never by a study file): it resumes as it started.
    """
    if p.n_val == 0:
        return
    if p.n_val is None:
        p.n_val = max(1, int(p.n_train) // 5)
    if p.n_val >= p.n_train:
        r.fail(
            "problem.n_val",
            f"{p.n_val} leaves no training samples out of n_train {p.n_train}: the validation samples are the last "
            f"n_val of the n_train; use e.g. n_val: {max(1, int(p.n_train) // 5)} or raise n_train",
        )


def _resolve_file_split(p, n_available: int, r: Reader) -> None:
    """Default split of a data file (80 % / 20 %), and a check that the requested one fits."""
    if p.n_test is None:
        p.n_test = max(1, n_available // 5)
    if p.n_train is None:
        p.n_train = n_available - p.n_test
    if p.n_train + p.n_test > n_available:
        r.fail(
            "problem.n_train",
            f"n_train + n_test = {p.n_train + p.n_test} exceeds the {n_available} samples in {p.data}; lower them",
        )


def _resolve_points_problem(study: Study, problem, r: Reader) -> None:
    """Point-set problems: sample counts from the file or the problem; no resolution (there is no grid to stride)."""
    p = study.problem
    if p.resolution is not None:
        r.fail("problem.resolution", f"{problem.name!r} is a point-set problem with no grid to stride; remove it")
    if p.data is not None:
        _ignore_generated_resolution(study)
        _check_data_path(p.data, r)

        if not is_point_file(p.data):
            r.fail(
                "problem.data",
                f"{p.data} is not a point-set file; generate one with `mutransfer data generate {problem.name} --out {p.data}`",
            )
        try:
            header = point_file_header(p.data)
        except UserInputError as exc:
            r.fail("problem.data", str(exc))
        if header.get("problem") not in (None, problem.name):
            r.fail(
                "problem.data",
                f"{p.data} holds {header.get('problem')!r} data, not {problem.name!r}; fix problem.name or data",
            )
        _resolve_file_split(p, int(header["n_samples"]), r)
    else:
        p.generated_resolution = p.generated_resolution or problem.generated_resolution
        p.n_train = problem.n_train if p.n_train is None else p.n_train
        p.n_test = problem.n_test if p.n_test is None else p.n_test
    check_search_algorithm(study, r)


def _check_proxy_resolution(study: Study, r: Reader) -> None:
    """``proxy_resolution``: a coarser grid the study's data stride to, without a ladder (whose rungs would need a
    grid each)."""
    res, full = study.proxy_resolution, int(study.problem.resolution or 0)
    if res is None:
        return
    problem = get_problem(study.problem.name)
    valid = [v for v in valid_resolutions(full, periodic=problem.periodic) if v < full]
    if res not in valid:
        below = [v for v in valid if v <= res][-1:] + [v for v in valid if v > res][:1]
        hint = f"e.g. proxy_resolution: {below[0]}" if below else "the training grid cannot be coarsened"
        r.fail(
            "proxy_resolution",
            f"{res} is not a coarser grid problem.resolution {full} strides to "
            f"({'periodic' if problem.periodic else 'node-grid'} data; coarser: "
            f"{', '.join(map(str, valid[-6:])) or 'none'}); {hint}",
        )
    if study.ladder:
        r.fail(
            "proxy_resolution",
            f"a ladder's rungs train at the target's grid; drop the ladder, or set proxy_resolution to the target's "
            f"grid ({study.problem.resolution}; the flag --proxy-resolution {study.problem.resolution})",
        )
    if study.problem.stream is True:  # 'auto' streams only data larger than half the RAM: known once they are opened
        r.fail("proxy_resolution", "a coarser proxy grid needs the data in memory; set problem.stream: false or auto")


def _check_modes(study: Study, r: Reader) -> None:
    p = study.problem
    if study.parametrization != "mup" and study.operator.k_exponent != 1.0:
        r.fail(
            "operator.k_exponent",
            f"{study.operator.k_exponent!r} sets the exponent of muP's K rule, and parametrization is "
            f"{study.parametrization}: set parametrization: mup, or remove operator.k_exponent",
        )
    if study.operator.k_exponent == K_EXPONENT_FROM_DATA and study.proxy_K == study.target_K:
        r.fail(
            "operator.k_exponent",
            f"'data' measures how the data's energy grows from proxy_K to target_K, and both are {study.proxy_K}: "
            "give a number (1 is the paper's rule) or a target_K larger than proxy_K",
        )
    same_k_scales = study.scales_width or study.scales_resolution
    if study.proxy_K > study.target_K or (study.proxy_K == study.target_K and not same_k_scales):
        r.fail(
            "proxy_K",
            f"must be < target_K ({study.target_K}): the proxy is the small model, e.g. proxy_K: {max(2, study.target_K // 4)} "
            "(equal K is fine when the width or the grid scales: target_width > operator.width, or proxy_resolution)",
        )
    _check_proxy_resolution(study, r)
    for key in ("proxy_K", "target_K"):
        k = getattr(study, key)
        try:
            check_modes(k, study.dim, study.parametrization)
            check_grid(study.proxy_grid_shape if key == "proxy_K" else study.grid_shape, k)
        except OperatorConfigError as exc:
            proxy_grid = key == "proxy_K" and study.scales_resolution
            grid = "x".join(str(n) for n in (study.proxy_grid_shape if proxy_grid else study.grid_shape))
            times = f", time_resolution {p.time_resolution}" if p.time_resolution is not None else ""
            res = f"proxy_resolution {study.proxy_resolution}" if proxy_grid else f"resolution {p.resolution}"
            r.fail(key, f"{exc} (training grid {grid} = {res}{times} + padding {study.padding})")


def check_top_k(study: Study, r: Reader) -> None:
    """At most every trial of the study can be carried to the target (a grid with a non-choice distribution is
    refused by :func:`check_search_algorithm`)."""
    if study.search.algorithm == "grid" and any(d.type != "choice" for d in study.search_space.values()):
        return
    trials = study.trial_count
    if study.search.top_k > trials:
        r.fail(
            "search.top_k",
            f"{study.search.top_k} is more than the study's {trials} trial(s); carry at most "
            f"{trials} to the target, e.g. top_k: {min(2, trials)}",
        )


def check_search_algorithm(study: Study, r: Reader) -> None:
    if study.search.objectives != "error" and single_objective(study.search.algorithm):
        r.fail(
            "search.algorithm",
            f"{study.search.algorithm} searches one objective (Optuna falls back to random sampling for two); "
            "use tpe, GPSampler or NSGAIISampler for search.objectives error+seconds",
        )
    problem = sampler_problem(study.search.algorithm)
    if problem is not None:
        r.fail("search.algorithm", problem)
    if study.search.algorithm == "grid":
        for name, dist in study.search_space.items():
            if dist.type != "choice":
                r.fail(
                    f"search_space.{name}.type",
                    "search.algorithm grid needs choice distributions; use type: choice with values: [...]",
                )
    if study.resources.gpus_per_trial and study.resources.gpus_per_trial > 1 and study.resources.gpus_per_trial % 1:
        r.fail("resources.gpus_per_trial", "must be a fraction <= 1 or a whole number of GPUs, e.g. 0.5 or 2")


def _check_data_path(path: str, r: Reader) -> None:
    """problem.data names a regular file: one line for a missing one, and for a FIFO or device by its type."""
    if Path(path).exists() and not Path(path).is_file():
        r.fail("problem.data", f"{path} is not a regular file (a folder, a FIFO or a device); name a data file")
    if not Path(path).is_file():
        r.fail("problem.data", f"file {path} not found; fix the path or use data: null for the cached default dataset")


def _data_header(path: str, r: Reader) -> tuple[int, int, str | None]:
    """(native resolution, n_samples, problem) from a data file's header, without reading arrays."""
    _check_data_path(path, r)

    try:
        with open_data(path) as src:
            return int(src.output.grid_shape[0]), int(src.n_samples), src.problem
    except UserInputError as exc:
        r.fail("problem.data", str(exc))
