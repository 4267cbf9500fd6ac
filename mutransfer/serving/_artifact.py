"""The trained target as a self-contained model directory: an MLflow model of the ``mutransfer`` flavor.

Layout (``<study dir>/model/``, and the same files in MLflow's logged model)::

    MLmodel            MLflow's model file; flavors: {mutransfer: {config: config.json, weights: state_dict.pt},
                       python_function: {loader_module: mutransfer.serving.pyfunc}} and a tensor signature
    config.json        everything that rebuilds the model without pickle (see :class:`ModelCard`)
    state_dict.pt      the model's state dict: tensors only, read with ``torch.load(weights_only=True)``

No pickled Python object is stored (``mlflow.pytorch.log_model`` would pickle the
whole module): the model is rebuilt from ``config.json`` by the registered operator
family that owns its ``model_config`` (``family.build``), and its weights loaded from tensors.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from mutransfer._atomic import save_torch
from mutransfer._tracking.runs import STUDY_TAG
from mutransfer._version import __version__
from mutransfer.errors import UserInputError
from mutransfer.serving._folder_schema import MLMODEL_FILE, RESTORE, read_card_fields, read_flavor
from operators.errors import OperatorConfigError
from operators.family import OperatorFamily, family_of_config

FLAVOR = "mutransfer"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "state_dict.pt"
#: the module MLflow's ``python_function`` flavor loads the model with (mutransfer.serving.pyfunc)
PYFUNC_LOADER = "mutransfer.serving.pyfunc"
FORMAT_VERSION = 1
#: the logged model's name: ``runs:/<run>/model`` resolves to it
LOGGED_NAME = "model"


@dataclass
class ModelCard:
    """config.json: the facts that rebuild the model and check data for it.

    ``input_shape`` / ``output_shape``: one training sample, (*grid, C) or (P, d + C_in + 1)
    for packed point sets; ``resolution``: the training grid size (None for point sets).
    """

    model_class: str
    model_config: dict
    problem: str
    dim: int
    point_problem: bool
    operator: str
    resolution: int | None
    time_resolution: int | None
    input_shape: list[int]
    output_shape: list[int]
    study: str
    hyperparameters: dict = field(default_factory=dict)
    test_error: float | None = None
    mutransfer_version: str = ""
    format_version: int = FORMAT_VERSION

    @property
    def input_channels(self) -> int:
        return int(self.input_shape[-1])

    @classmethod
    def from_dict(cls, d: dict) -> ModelCard:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def card_for(
    study, model_class: str, model_config: dict, data, *, hyperparameters: dict, test_error: float | None
) -> ModelCard:
    """The card of the target (class name, its ``config``) trained by ``study`` on ``data`` (a SplitData)."""

    return model_card(
        model_class,
        model_config,
        data,
        problem=study.problem.name,
        dim=int(study.dim),
        point_problem=bool(study.point_problem),
        operator=study.operator.type,
        time_resolution=study.problem.time_resolution,
        name=study.name,
        hyperparameters=hyperparameters,
        test_error=test_error,
    )


def model_card(
    model_class: str,
    model_config: dict,
    data,
    *,
    problem: str,
    dim: int,
    point_problem: bool,
    operator: str,
    time_resolution: int | None,
    name: str,
    hyperparameters: dict,
    test_error: float | None,
) -> ModelCard:
    """The card of a model (class name, its ``config``) trained on ``data`` (a SplitData): a study's target
    (:func:`card_for`) or what `mutransfer train --out` keeps (``name``: the study's, or ``train``)."""

    return ModelCard(
        model_class=model_class,
        model_config=_plain(model_config),
        problem=problem,
        dim=int(dim),
        point_problem=bool(point_problem),
        operator=operator,
        resolution=None if point_problem else int(data.grid_shape[0]),
        time_resolution=time_resolution,
        input_shape=[int(s) for s in data.test_x.shape[1:]],
        output_shape=[int(s) for s in data.test_y.shape[1:]],
        study=name,
        hyperparameters=_plain(hyperparameters),
        test_error=test_error,
        mutransfer_version=__version__,
    )


def _plain(value):
    """Tuples → lists, recursively (JSON round-trips it unchanged)."""
    return json.loads(json.dumps(value))


def write_model_dir(directory: Path, card: ModelCard, state_dict: dict) -> Path:
    """Write MLmodel, config.json and state_dict.pt as the folder ``directory``; returns it.

    The files are written into a hidden folder beside it, then that folder is renamed into place (an earlier folder
    there is moved aside first and removed after): a reader, or a sweep killed while it writes, finds the whole
    model or the one before it, never half of one."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    old = None
    try:
        _write_model_files(staging, card, state_dict)
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old.", dir=directory.parent)) / directory.name
            os.replace(directory, old)
        os.replace(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None and not directory.exists():
            os.replace(old, directory)  # put the earlier model back
        raise
    finally:
        if old is not None:
            shutil.rmtree(old.parent, ignore_errors=True)
    return directory


def _write_model_files(directory: Path, card: ModelCard, state_dict: dict) -> None:
    from mlflow.models import Model  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a model is written
    from mlflow.pyfunc import add_to_model  # noqa: PLC0415 -- deferred: mlflow (~1 s), only when a model is written

    (directory / CONFIG_FILE).write_text(json.dumps(asdict(card), indent=2))
    save_torch({k: v.detach().cpu() for k, v in state_dict.items()}, directory / WEIGHTS_FILE)
    mlmodel = Model(artifact_path="model", signature=_signature(card))
    mlmodel.add_flavor(
        FLAVOR, config=CONFIG_FILE, weights=WEIGHTS_FILE, model_class=card.model_class, format_version=FORMAT_VERSION
    )
    # any MLflow client: mlflow.pyfunc.load_model imports PYFUNC_LOADER, which rebuilds the model (no pickle)
    add_to_model(mlmodel, loader_module=PYFUNC_LOADER, data=".")
    mlmodel.save(directory / MLMODEL_FILE)
    for path in directory.iterdir():  # on disk before the folder is renamed into place
        with open(path, "rb") as f:
            os.fsync(f.fileno())


def log_logged_model(client, experiment_id: str, run_id: str, directory: Path, *, study: str) -> str:
    """An MLflow logged model named ``model`` (source: the target run) holding ``directory``; returns its id."""

    logged = client.create_logged_model(
        experiment_id, name=LOGGED_NAME, source_run_id=run_id, tags={STUDY_TAG: study}, model_type="mutransfer"
    )
    client.log_model_artifacts(logged.model_id, str(directory))
    client.finalize_logged_model(logged.model_id, "READY")
    return logged.model_id


def _signature(card: ModelCard):
    """MLflow's signature: tensors (n, *grid, C) in and out, float32, every size free but the channels (a grid
    model runs at other resolutions; point sets vary in size)."""
    import numpy as np  # noqa: PLC0415 -- deferred with mlflow
    from mlflow.models.signature import ModelSignature  # noqa: PLC0415 -- deferred: mlflow (~1 s)
    from mlflow.types.schema import Schema, TensorSpec  # noqa: PLC0415 -- deferred: mlflow (~1 s)

    def tensor(sample: list[int]) -> Schema:
        return Schema([TensorSpec(np.dtype(np.float32), (-1, *([-1] * (len(sample) - 1)), int(sample[-1])))])

    return ModelSignature(inputs=tensor(card.input_shape), outputs=tensor(card.output_shape))


def read_model_dir(directory: Path):
    """(model in eval mode on the CPU, ModelCard) from a model directory; one-line errors for anything else."""

    directory = Path(directory)
    if not (directory / MLMODEL_FILE).is_file():
        raise UserInputError(
            f"{directory} is not a mutransfer model directory (no MLmodel file); "
            "pass a study or a runs:/ or models:/ URI of a sweep's target"
        )
    config_name, weights_name = read_flavor(directory, FLAVOR, CONFIG_FILE, WEIGHTS_FILE)
    card = ModelCard.from_dict(read_card_fields(directory, config_name, FORMAT_VERSION))
    family = family_of_config(card.model_config)  # the registered family that built it rebuilds it
    if family is None:
        raise UserInputError(
            f"model {directory}: no registered operator family owns its model_config ({card.model_class}, operator "
            f"{card.operator!r}); register that family first (a newer mutransfer or a plug-in wrote it?)"
        )
    weights = directory / weights_name
    if not weights.is_file():
        raise UserInputError(f"model {directory}: {weights.name} is missing; restore the model folder")
    try:
        checked = _check_weight_bytes(directory, family, card, weights)
        with contextlib.nullcontext() if checked else _address_space_budget(directory, weights):
            model = family.build(card.model_config)
    except UserInputError:
        raise
    except (
        OperatorConfigError,
        KeyError,
        TypeError,
        ValueError,
        OverflowError,
        RecursionError,
    ) as exc:  # values of a wrong type
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise UserInputError(
            f"model {directory}: {config_name} does not rebuild a {card.model_class} ({reason}); {RESTORE}"
        ) from None
    if type(model).__name__ != card.model_class:
        raise UserInputError(
            f"model {directory}: model_class {card.model_class!r} but its config rebuilds a {type(model).__name__}; "
            "config.json was edited or corrupted"
        )
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle.UnpicklingError for anything but tensors; never unpickled further
        raise UserInputError(
            f"model {directory}: {weights_name} is not a plain state dict of "
            f"tensors ({type(exc).__name__}); refusing to load it"
        ) from None
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:  # keys or shapes that differ; not a mapping of tensors
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = (lines[1:] or lines or [type(exc).__name__])[0]
        raise UserInputError(
            f"model {directory}: {weights.name} does not fit the model config.json describes ({first[:160]}); one of "
            "them was edited or corrupted: restore the model folder (or train it again)"
        ) from None
    model.eval()
    _probe_shapes(directory, model, card)
    return model, card


def _probe_shapes(directory: Path, model: torch.nn.Module, card: ModelCard) -> None:
    """One forward pass on a zero sample of ``card.input_shape`` (a point set's points all real): its output must be
    ``card.output_shape`` (a config.json whose shapes were edited is one line here, not a traceback in the middle of
    an evaluation)."""
    reason = "not a tensor"
    sample = torch.zeros((1, *card.input_shape))
    if card.point_problem:  # a packed point set (P, d + C + 1): its last channel is the mask, every point real
        sample[..., -1] = 1.0
    try:
        with torch.no_grad():
            out = model(sample)
    except Exception as exc:  # noqa: BLE001 -- whatever the model raises on a sample it cannot take
        out, reason = None, (str(exc).splitlines() or [type(exc).__name__])[0][:160]
    if out is None or not isinstance(out, torch.Tensor) or list(out.shape[1:]) != list(card.output_shape):
        got = f"gives {list(out.shape[1:])}" if isinstance(out, torch.Tensor) else f"fails ({reason})"
        raise UserInputError(
            f"model {directory}: the model on a sample of config.json's input_shape {card.input_shape} {got}, not "
            f"its output_shape {card.output_shape}; config.json was edited or corrupted: {RESTORE}"
        )


def _check_weight_bytes(directory: Path, family: OperatorFamily, card: ModelCard, weights: Path) -> bool:
    """A one-line UserInputError if ``card``'s config describes a model whose weights are far larger than the
    ``weights`` file holds: an edited config.json (``width: 1000000`` asked 4 TB of memory before this check,
    ``layers: 10^9`` built modules for ever). The family's planner counts the parameters first, from the config alone;
    then the model is built on torch's meta device, which allocates nothing. A model that cannot be built there (an
    operation without a meta kernel: a user's model) is not checked that way: False, and it is built under
    :func:`_address_space_budget`."""
    config, stored = card.model_config, weights.stat().st_size
    try:
        grid = tuple(card.input_shape[:-1]) or (1,)
        # a lower bound: 4 bytes a parameter (a complex spectral weight holds 8)
        planned = 4 * int(family.plan(config, grid=grid, device="cpu").total_params)
    except Exception:  # noqa: BLE001 -- a planner that cannot read this config: the meta build below decides
        planned = 0
    _refuse_declared(directory, planned, stored, weights)
    try:
        with torch.device("meta"):
            shell = family.build(config)
    except (OperatorConfigError, KeyError):
        raise
    except Exception:  # an operation without a meta kernel (a user's model): built under a budget instead
        return planned > 0
    declared = sum(  # what the file must hold (a model's state may carry other values: neuraloperator's does)
        t.numel() * t.element_size() for t in shell.state_dict().values() if isinstance(t, torch.Tensor)
    )
    _refuse_declared(directory, declared, stored, weights)
    return True


#: the address space a model that cannot be planned may take while it is built: this many times its weights file,
#: plus a fixed allowance (torch's own buffers and thread stacks)
BUDGET_FACTOR, BUDGET_BASE = 4, 2**30


@contextlib.contextmanager
def _address_space_budget(directory: Path, weights: Path) -> Iterator[None]:
    """While a model that neither its planner nor the meta device can size is built: at most
    ``BUDGET_FACTOR x weights + BUDGET_BASE`` more bytes of address space (RLIMIT_AS, Linux), so that an edited
    config.json asking terabytes is one line, not an allocation the system kills the process for."""
    try:
        import resource  # noqa: PLC0415 -- deferred: POSIX only, and only for a model that could not be planned

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        status = Path("/proc/self/status").read_text()
        used = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmSize:"))) * 1024
    except (ImportError, OSError, StopIteration, ValueError):  # not Linux: built unbounded, as before
        yield
        return
    allowed = BUDGET_FACTOR * weights.stat().st_size + BUDGET_BASE
    limit = used + allowed if hard == resource.RLIM_INFINITY else min(used + allowed, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "memory" not in str(exc).lower():
            raise
        raise UserInputError(
            f"model {directory}: config.json describes a model that needs more than {allowed / 2**20:,.0f} MiB to "
            f"build, but {weights.name} holds {weights.stat().st_size / 2**20:,.1f} MiB; config.json was edited or "
            "corrupted: restore the model folder (or train it again)"
        ) from None
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _refuse_declared(directory: Path, declared: int, stored: int, weights: Path) -> None:
    if declared > 2 * stored + 2**20:
        raise UserInputError(
            f"model {directory}: config.json describes {declared / 2**20:,.1f} MiB of weights but {weights.name} "
            f"holds {stored / 2**20:,.1f} MiB; config.json was edited or corrupted: restore the model folder (or "
            "train it again)"
        )
