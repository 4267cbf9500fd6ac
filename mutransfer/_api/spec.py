"""A study's settings as a value: :class:`StudySpec` (its YAML text, validated once)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import yaml

from mutransfer._study import Study, default_study_text, load_study
from mutransfer._study._study_text import read_study_text


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

    def __post_init__(self) -> None:
        self.study  # noqa: B018 -- checked once, here: a bad field is one line now, not at optimize()

    @classmethod
    def from_yaml(cls, path: str | os.PathLike) -> StudySpec:
        """The study of a YAML file.

        Args:
            path: a study file (e.g. one of the repository's ``studies/``); relative ``problem.data`` paths are
                read from the working directory.

        Returns:
            The checked spec.

        Example:
            >>> spec = mt.StudySpec.from_yaml("studies/quick.yaml")  # doctest: +SKIP
        """
        return cls(read_study_text(path), str(path))

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
        return StudySpec(yaml.safe_dump(mapping, sort_keys=False), self.source)

    @property
    def study(self) -> Study:
        """The validated study (mutransfer's internal record of it)."""
        return load_study(self.source, text=self.text)[0]

    @property
    def name(self) -> str:
        """The study's name (its folder under the storage and its MLflow parent run)."""
        return self.study.name
