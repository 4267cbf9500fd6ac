"""Reading a study: the YAML file (or the built-in default), CLI overrides, the sections, the checks.

A study is a YAML file read with ``yaml.safe_load`` into the :class:`Study` tree
and validated *before* any compute: unknown keys, wrong types, out-of-range
values, ``proxy_K >= target_K`` or a K that does not fit the training grid raise
:class:`~mutransfer.errors.UserInputError` with one line naming the field path
and the fix, e.g.::

    study studies/x.yaml: search_space.lr.low: must be > 0, e.g. 1e-4

CLI overrides are applied to the raw mapping before validation, so an overridden
value is validated like a file value and its error names the flag. The default
study (``mutransfer sweep`` without ``--study``) is ``quick.yaml``, shipped inside
the package and identical to ``studies/quick.yaml``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from mutransfer._config.reader import Reader, is_plain_int, kind_of, read_section
from mutransfer._config.settings import REQUIRED, Setting, setting_of, settings_of
from mutransfer._study._study_text import UniqueKeyLoader, read_study_text
from mutransfer._study.ladder import first_size_overrides
from mutransfer._study.resolve import resolve_and_check
from mutransfer._study.schema import (
    TOP_ORDER,
    BudgetSpec,
    OperatorSpec,
    ProblemSpec,
    ResourcesSpec,
    SearchSpec,
    Study,
    TargetSpec,
    TrackingSpec,
    TrainingSpec,
    family_only_fields,
)
from mutransfer._study.search_space import combination_problem, read_search_space
from mutransfer._training.hyperparameters import consistency_problem
from mutransfer.errors import UserInputError
from operators.errors import OperatorConfigError
from operators.factory import (
    FACTORY_FIELDS,
    check_roles,
    factory_family,
    is_user_operator,
    locate,
    model_class_name,
    plugins,
    trusted_from_folder,
)
from operators.registry import OPERATORS, SPECTRAL_HYPERPARAMETERS

DEFAULT_STUDY = "quick"
#: the longest name of a folder (one path component) on common file systems: an experiment's artifact folder
EXPERIMENT_NAME_BYTES = 255
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: operator options the study sets through its own fields (not through operator.options): option -> field
_RESERVED_OPTIONS = {
    "coord_dim": None,
    "in_channels": None,
    "out_channels": None,
    "width": "operator.width",
    "layers": "operator.layers",
    "heads": "operator.heads",
    "width_parametrization": "width_parametrization",
    "base_width": "operator.width",
}
#: a factory's arguments the study sets (operators.factory); its other arguments, depth included, go in options
_FACTORY_RESERVED = {"K": "proxy_K and target_K", "width": "operator.width", "in_channels": None, "out_channels": None}


def _owners(key: str) -> str:
    """Who declares operator field ``key``: "fno only", "fno and a user's factory only" or "the attention operators
    (galerkin, ono, gnot)" (factories registered in this process are not listed by name)."""
    owners = [f.name for f in OPERATORS.values() if key in f.fields and not f.facts_on_parameters]
    either = " and a user's factory" if key in FACTORY_FIELDS else ""
    return f"{owners[0]}{either} only" if len(owners) == 1 else f"the attention operators ({', '.join(owners)}){either}"


def _spectral_names() -> str:
    return "/".join(f.name for f in OPERATORS.values() if f.scales("K"))


def _read_factory(
    r: Reader, kind: str, search: tuple[Path, ...], probe: dict[str, object], trusted: bool
) -> tuple[str | None, str]:
    """A factory ``operator.type`` ("mymodel:build"): (the directory its module comes from, its model's class name),
    its family registered; the factory imported and called once at ``probe``'s sizes, so that a factory that cannot
    be imported, fails or returns no module is refused here, before any folder, lock or run."""
    try:
        path = plugins().get(kind, kind)  # an installed plug-in's name, or a factory path
        directory = locate(path, search)
        if not trusted and not trusted_from_folder(path, directory):
            r.fail(
                r.where("type"),
                f"{kind!r}: a study folder names this factory, which is neither a module in the working directory "
                "nor an installed plug-in; pass --study with the study file you trust",
            )
        label = model_class_name(path, directory, probe)
        factory_family(path, directory, label, name=kind)
    except OperatorConfigError as exc:
        r.fail(r.where("type"), str(exc).removeprefix("operator.type "))
    return directory, label


def _check_factory_roles(study: Study, r: Reader) -> None:
    """A factory's target read against its proxy (shapes only, on the meta device): ambiguous roles fail here."""
    o = study.operator
    sizes = {"in_channels": 1, "out_channels": 1, "options": o.options}
    proxy = {**sizes, "K": study.proxy_K, "width": o.width}
    target = {**sizes, "K": study.target_K, "width": study.target_width or o.width}
    try:
        check_roles(o.type, o.factory_dir, proxy, target)
    except OperatorConfigError as exc:
        r.fail(r.where("operator.type"), f"{o.type!r}: {exc}")


def _probe(mapping: object) -> dict[str, object]:
    """The sizes a factory is first called at: the proxy's (K, width) as the file gives them, one channel in and out."""
    top: dict = mapping if isinstance(mapping, dict) else {}
    operator: dict = top["operator"] if isinstance(top.get("operator"), dict) else {}
    k, width, options = top.get("proxy_K"), operator.get("width"), operator.get("options")
    return {
        "K": k if isinstance(k, int) and is_plain_int(k) and k >= 2 else 8,
        "width": width if isinstance(width, int) and is_plain_int(width) and width >= 1 else 32,
        "in_channels": 1,
        "out_channels": 1,
        "options": options if isinstance(options, dict) else {},
    }


def _read_operator(
    r: Reader, search: tuple[Path, ...] = (), probe: dict[str, object] | None = None, trusted: bool = True
) -> OperatorSpec:
    raw = r.mapping.get("type") if isinstance(r.mapping, dict) else None
    factory: tuple[str | None, str] | None = None
    registered = OPERATORS.get(raw) if isinstance(raw, str) else None
    if isinstance(raw, str) and (is_user_operator(raw) or (registered is not None and registered.facts_on_parameters)):
        factory = _read_factory(r, raw, search or (Path.cwd(),), probe or _probe({}), trusted)
    elif isinstance(raw, str) and raw and raw not in OPERATORS:
        installed = "".join(f", {name}" for name in plugins())
        r.fail(
            r.where("type"),
            f"{raw!r} is unknown; use one of: {', '.join(OPERATORS)}{installed}, or your own factory as "
            "module:function (e.g. mymodel:build for mymodel.py beside the study file: docs/byo.md)",
        )
    kind = r.string("type", "fno", choices=tuple(OPERATORS))
    family = OPERATORS[kind]
    for key in family_only_fields():
        if key not in family.fields and r.has(key):
            r.fail(r.where(key), f"applies to {_owners(key)}, not {kind}; remove it")
    spec = read_section(r, OperatorSpec)
    reserved = _RESERVED_OPTIONS if factory is None else _FACTORY_RESERVED
    for key in spec.options:
        if key in reserved:
            field_name = reserved[key]
            fix = f"set {field_name} instead" if field_name else "the study derives it from the data; remove it"
            r.fail(f"{r.where('options')}.{key}", f"is set by the study, not in options; {fix}")
    if "heads" in family.fields and spec.heads is None:
        spec.heads = 4
    if factory is not None:
        spec.factory_dir, spec.factory_label = factory
    return spec


def _read_training(r: Reader) -> TrainingSpec:
    t = read_section(r, TrainingSpec)
    problem = consistency_problem(t)
    if problem:
        r.fail(r.where(problem[0]), problem[1])
    return t


def parse_study(
    mapping: Any,
    source: str,
    *,
    flags: dict[str, str] | None = None,
    factory_search: tuple[Path, ...] = (),
    factory_trusted: bool = True,
) -> Study:
    """Validate a raw mapping (from YAML) into a :class:`Study`.

    ``flags`` maps field paths to the CLI flags that set them, so their errors say so. ``factory_search``: where
    a factory ``operator.type``'s module may be imported from, in order (the study file's directory, then the
    working directory; by default the working directory only), never a study folder. ``factory_trusted`` False:
    the mapping comes from a folder (a study folder's copy), whose factory must be a module of the working
    directory or an installed plug-in (operators.factory.trusted_from_folder).
    """
    r = Reader(source, "", mapping, flags or {})
    name = r.string("name", example="my-study")
    if not _NAME_RE.fullmatch(name):
        r.fail(
            "name",
            f"{name[:40]!r}{'...' if len(name) > 40 else ''} must be 1 to 100 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (it names a directory), e.g. burgers-k6",
        )
    problem = read_section(r.sub("problem"), ProblemSpec)
    if not r.has("search_space"):
        r.fail("search_space", "is required; e.g. search_space: {lr: {type: loguniform, low: 1e-4, high: 1e-2}}")
    operator = _read_operator(r.sub("operator"), factory_search, _probe(mapping), factory_trusted)
    family = OPERATORS[operator.type]
    if not family.scales("K"):
        for key in ("proxy_K", "target_K", "parametrization", "proxy_resolution"):
            if r.has(key):
                fix = {
                    "parametrization": "use width_parametrization",
                    "proxy_resolution": "shrink the proxy in width (operator.width < target_width)",
                }.get(key, "use target_width to scale the width")
                r.fail(
                    key,
                    f"applies to {_spectral_names()} only ({operator.type} has no Fourier modes); remove it and {fix}",
                )
    top = {name: (default, spec) for name, default, spec in settings_of(Study)}

    def read(key: str, default=None):
        return r.setting(key, top[key][0] if default is None else default, top[key][1])

    study = Study(
        name=name,
        problem=problem,
        operator=operator,
        parametrization=read("parametrization"),
        proxy_K=read("proxy_K", REQUIRED) if family.scales("K") else None,
        target_K=read("target_K", REQUIRED) if family.scales("K") else None,
        target_width=read("target_width"),
        proxy_resolution=read("proxy_resolution") if family.scales("K") else None,
        width_parametrization=read("width_parametrization"),
        ladder=read("ladder"),
        ladder_keep=read("ladder_keep"),
        search_space=read_search_space(r.sub("search_space"), operator, family.fields, family.facts_on_parameters),
        training=_read_training(r.sub("training")),
        search=read_section(r.sub("search"), SearchSpec),
        budget=read_section(r.sub("budget"), BudgetSpec),
        resources=read_section(r.sub("resources"), ResourcesSpec),
        target=read_section(r.sub("target"), TargetSpec),
        tracking=read_section(r.sub("tracking"), TrackingSpec),
        source=source,
    )
    if study.family.facts_on_parameters:
        _check_factory_roles(study, r)
    encoded = len(quote(study.tracking.experiment, safe=""))
    if encoded > EXPERIMENT_NAME_BYTES:  # a SQLite store keeps its artifacts in mlruns/<encoded name>
        r.fail(
            "tracking.experiment",
            f"{study.tracking.experiment[:20]!r}... is {encoded} characters once encoded as a folder name "
            f"(mlruns/<experiment> beside a SQLite store); at most {EXPERIMENT_NAME_BYTES}",
        )
    clash = combination_problem(study.training, study.search_space)
    if clash:
        r.fail(f"search_space.{clash[0]}", clash[1])
    fixed = {"clip_value": study.training.clip_value is not None, "init_scale": study.training.init_scale != 1.0}
    for key in (k for k in SPECTRAL_HYPERPARAMETERS if not family.applies(k)):
        where = f"search_space.{key}" if key in study.search_space else f"training.{key}" if fixed[key] else None
        if where:
            r.fail(where, f"acts on FNO's spectral weights only, not {operator.type}; remove it")
    r.finish(TOP_ORDER)
    resolve_and_check(study, r)
    return study


def default_study_text() -> str:
    """The built-in default study (quick.yaml shipped inside the package)."""
    return resources.files("mutransfer").joinpath("studies_data", f"{DEFAULT_STUDY}.yaml").read_text(encoding="utf-8")


def read_study_mapping(path: str | os.PathLike | None, text: str | None = None) -> tuple[dict, str]:
    """(raw mapping, source label) for a study file, or the built-in default when ``path`` is None; ``text``: the
    study's YAML given as text (mutransfer.StudySpec; ``path`` then only labels it)."""
    if text is not None:
        source = str(path) if path is not None else "the study spec"
    elif path is None:
        text, source = default_study_text(), f"{DEFAULT_STUDY} (built-in)"
    else:
        source, text = str(path), read_study_text(path)
    try:
        mapping = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 -- a SafeLoader: plain YAML types only
    except RecursionError:  # PyYAML composes nested collections recursively
        raise UserInputError(
            f"study {source}: nested too deeply to read (a study nests a few levels); fix the file"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserInputError(f"study {source}: not valid YAML ({where}{reason}); fix the syntax") from None
    if not isinstance(mapping, dict):
        raise UserInputError(
            f"study {source}: must be a YAML mapping of fields (name, problem, proxy_K, ...), got "
            f"{_shape_only(mapping)}"
        )
    return mapping, source


#: CLI override name -> (field path, flag)
OVERRIDES = {
    "name": ("name", "--name"),
    "proxy_K": ("proxy_K", "--proxy-K"),
    "target_K": ("target_K", "--target-K"),
    "proxy_width": ("operator.width", "--proxy-width"),
    "target_width": ("target_width", "--target-width"),
    "num_trials": ("search.num_trials", "--num-trials"),
    "epochs": ("budget.epochs", "--epochs"),
    "target_epochs": ("target.epochs", "--target-epochs"),
    "tracking_uri": ("tracking.uri", "--tracking-uri"),
    "precision": ("training.precision", "--precision"),
    "ladder": ("ladder", "--ladder"),
    "ladder_keep": ("ladder_keep", "--ladder-keep"),
    "top_k": ("search.top_k", "--top-k"),
    "k_exponent": ("operator.k_exponent", "--k-exponent"),
    "proxy_resolution": ("proxy_resolution", "--proxy-resolution"),
}


#: the settings class of each section of a study file
SECTIONS: dict[str, type] = {
    "problem": ProblemSpec,
    "operator": OperatorSpec,
    "training": TrainingSpec,
    "search": SearchSpec,
    "budget": BudgetSpec,
    "resources": ResourcesSpec,
    "target": TargetSpec,
    "tracking": TrackingSpec,
}


def declared(path: str) -> tuple[Setting, object]:
    """(Setting, default) of the study field at ``path`` ("proxy_K", "budget.epochs", …): one declaration."""
    section, _, name = path.rpartition(".")
    cls = SECTIONS[section] if section else Study
    default = next(d for n, d, _spec in settings_of(cls) if n == name)
    return setting_of(cls, name), default


@dataclass(frozen=True)
class Override:
    """One CLI flag that changed a study field (reported, never silent)."""

    flag: str
    path: str
    value: Any
    previous: Any

    def describe(self) -> str:
        before = "unset" if self.previous is _UNSET else repr(self.previous)
        return f"{self.flag} {self.value!r} overrides {self.path} (study file: {before})"


_UNSET = object()


def _get_path(mapping: dict, path: str):
    node = mapping
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _UNSET
        node = node[part]
    return node


def _set_path(mapping: dict, path: str, value) -> None:
    *parents, last = path.split(".")
    node = mapping
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {} if node.get(part) is None else node[part]
        node = node[part]
    node[last] = value


def load_study(
    path: str | os.PathLike | None = None,
    overrides: dict[str, Any] | None = None,
    *,
    text: str | None = None,
    folder: str | os.PathLike | None = None,
) -> tuple[Study, list[Override]]:
    """Load, override and validate a study (no compute, no Ray, no data generation).

    ``overrides`` uses the keys of :data:`OVERRIDES` (None values are ignored); ``text``: the study's YAML given as
    text (``path`` then only labels it). ``folder``: the folder of the file the study was read from (a relative
    ``problem.data`` and a factory's module are found beside it, then in the working directory); by default the
    folder of ``path`` when the study is read from it, else none. Returns the study and the overrides that changed a
    value.
    """
    mapping, source = read_study_mapping(path, text)
    applied: list[Override] = []
    flags: dict[str, str] = {}
    overrides = _with_ladder_start(mapping, overrides or {})
    for key, value in overrides.items():
        if value is None:
            continue
        field_path, flag = OVERRIDES[key]
        previous = _get_path(mapping, field_path)
        flags[field_path] = flag
        if previous != value:
            applied.append(Override(flag, field_path, value, previous))
        _set_path(mapping, field_path, value)
    if folder is None and path is not None and text is None:
        folder = Path(path).resolve().parent
    search = (Path(folder).resolve(), Path.cwd()) if folder is not None else (Path.cwd(),)
    if folder is not None:
        _data_beside_the_study(mapping, Path(folder).resolve())
    study = parse_study(mapping, source, flags=flags, factory_search=search)
    for field_path, flag in flags.items():  # a flag would fix what the search draws: say so rather than lose it
        searched = field_path.removeprefix("training.")
        if searched in study.search_space:
            raise UserInputError(
                f"study {source}: search_space.{searched}: searched, so {flag} (which sets {field_path}) would be "
                f"overridden by every trial's value; drop {flag} or the search_space.{searched} entry"
            )
    return study, applied


def _data_beside_the_study(mapping: Any, folder: Path) -> None:
    """A relative ``problem.data`` is the file beside the study file (a study copied with its data keeps working
    from any directory); where no such file is there but one is in the working directory, that one (studies
    written before paths were the study file's)."""
    problem = mapping.get("problem") if isinstance(mapping, dict) else None
    if not isinstance(problem, dict):
        return
    data = problem.get("data")
    if not isinstance(data, str) or not data.strip() or data.startswith("~") or Path(data).is_absolute():
        return
    beside = folder / data
    problem["data"] = os.path.normpath(beside if beside.exists() or not Path(data).exists() else Path(data).absolute())


def _with_ladder_start(mapping: dict, overrides: dict) -> dict:
    """``--ladder 4 8 16`` also sets the proxy's size to its first entry (reported like any override)
    unless ``--proxy-K`` / ``--proxy-width`` say otherwise."""

    ladder = overrides.get("ladder")
    if not ladder:
        return overrides
    operator = _get_path(mapping, "operator.type")
    family = OPERATORS.get(operator if isinstance(operator, str) else "fno")
    implied = first_size_overrides(ladder, family.scales("K") if family is not None else True)
    return {**overrides, **{k: v for k, v in implied.items() if overrides.get(k) is None}}


def study_from_yaml_text(text: str, source: str, factory_search: tuple[Path, ...] = ()) -> Study:
    """Parse a study stored as YAML text (e.g. the copy kept in a study directory). ``factory_search``: the
    directories a factory ``operator.type`` it names may come from (by default the working directory only)."""
    try:
        mapping = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        raise UserInputError(f"study {source}: not valid YAML; delete the study directory or fix the file") from None
    return parse_study(mapping, source, factory_search=factory_search, factory_trusted=False)


def _shape_only(document: object) -> str:
    """What a whole document is, without its contents (a file given by mistake, /etc/passwd, is not echoed)."""
    if isinstance(document, str):
        return f"text of {len(document):,} characters (not a study file?)"
    return kind_of(document)
