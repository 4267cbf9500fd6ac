"""A study's settings as a value: :class:`StudySpec` (its YAML text, validated once)."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

from mutransfer._study import Study, default_study_text, load_study
from mutransfer._study._study_text import read_study_text


@dataclass(frozen=True)
class CommandLine:
    """What ``mutransfer sweep`` was given besides a study's settings, carried by its spec to
    :func:`mutransfer.create_study`: the study file by its path (None: the built-in study, or on ``--resume`` the
    stored one), the flags' overrides (keys of mutransfer._study.OVERRIDES: reported as ``override:`` lines, kept in
    the study folder, compared with the stored study on ``--resume``), ``--resume``, ``--rebuild-state`` and
    ``--json`` (the console then shows progress lines, not a live bar)."""

    study_path: str | None
    overrides: Mapping[str, object]
    resume: bool = False
    rebuild_state: bool = False
    json: bool = False


@dataclass(frozen=True)
class StudySpec:
    """A study's settings, checked: the same fields as a study file (docs/sweep.md, "Study files").

    Make one from a file (:meth:`from_yaml`), from the built-in quick study (:meth:`default`) or from YAML text
    (:meth:`from_text`); :meth:`replace` gives a copy with some fields changed. Every value is checked when the spec is
    made: a bad one raises :class:`mutransfer.UserInputError` with one line naming the field and the fix.

    Example:
        >>> import mutransfer as mt
        >>> spec = mt.StudySpec.default().replace({"name": "mine", "search.num_trials": 4})
        >>> spec.name
        'mine'
    """

    #: the study's YAML text
    text: str
    #: where it came from (a path, or a label), for messages
    source: str
    #: the study file it was read from (:meth:`from_yaml`; None for text): a relative ``problem.data`` and a
    #: factory's module (``operator.type: "mymodel:build"``) are found beside it, as ``mutransfer sweep --study``
    #: finds them, then in the working directory
    path: str | None = None
    #: the command line that made it (:meth:`_of_command`; None for a spec made in Python)
    _command: CommandLine | None = field(default=None, kw_only=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.study  # noqa: B018 -- checked once, here: a bad field is one line now, not at optimize()

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> StudySpec:
        """The study of a YAML file.

        Args:
            path: a study file (e.g. one of the repository's ``studies/``); a relative ``problem.data`` and a
                factory's module are found beside it (then in the working directory), as ``mutransfer sweep
                --study`` finds them, so a study copied with its data and its model works from any directory.

        Returns:
            The checked spec.

        Example:
            >>> spec = mt.StudySpec.from_yaml("studies/quick.yaml")  # doctest: +SKIP
        """
        return cls(read_study_text(path), str(path), os.path.abspath(path))

    @classmethod
    def from_text(cls, text: str, source: str = "the study spec") -> StudySpec:
        """The study of YAML ``text``.

        Args:
            text: a study file's contents.
            source: how messages name it.

        Returns:
            The checked spec.

        Example:
            >>> spec = mt.StudySpec.from_text(mt.StudySpec.default().text)
        """
        return cls(text, source)

    @classmethod
    def _of_command(cls, command: CommandLine) -> StudySpec:
        """The study ``mutransfer sweep`` runs: its file (or the built-in study) with the flags' overrides applied; a
        bad file or flag is one line worded by the flag, before anything is made. The spec carries the command
        (``_command``), so :func:`mutransfer.create_study` reports the overrides and resumes as the command asks.

        Args:
            command: what the command was given.

        Returns:
            The checked spec.
        """
        resolved, _ = load_study(command.study_path, dict(command.overrides))
        label = command.study_path if command.study_path is not None else f"{resolved.name} (built-in)"
        return cls(resolved.to_yaml(), label, command.study_path, _command=command)

    @classmethod
    def default(cls) -> StudySpec:
        """The built-in quick study (``studies/quick.yaml``: Burgers, K 6 → 24, width 16 → 64, data generated).

        Returns:
            The checked spec.

        Example:
            >>> mt.StudySpec.default().name
            'quick'
        """
        return cls(default_study_text(), "quick (built-in)")

    def replace(self, values: dict[str, object]) -> StudySpec:
        """A copy with fields changed, by their dotted path in the study file.

        Args:
            values: e.g. ``{"name": "mine", "search.num_trials": 4, "budget.epochs": 2}``.

        Returns:
            The checked copy.

        Example:
            >>> mt.StudySpec.default().replace({"target.epochs": 3}).study.target.epochs
            3
        """
        mapping = yaml.safe_load(self.text)
        for path, value in values.items():
            node = mapping
            *parents, last = path.split(".")
            for part in parents:
                child = node.get(part) if isinstance(node, dict) else None
                if not isinstance(child, dict):
                    child = node[part] = {}
                node = child
            node[last] = value
        return StudySpec(yaml.safe_dump(mapping, sort_keys=False), self.source, self.path)

    @functools.cached_property
    def study(self) -> Study:
        """The validated study (mutransfer's internal record of it), parsed once: when the spec is made."""
        return load_study(self.source, text=self.text, folder=self.folder)[0]

    @property
    def folder(self) -> str | None:
        """The folder of :attr:`path` (None for a spec made from text)."""
        return None if self.path is None else os.path.dirname(os.path.abspath(self.path))

    @property
    def name(self) -> str:
        """The study's name (its folder under the storage and its MLflow parent run)."""
        return self.study.name
