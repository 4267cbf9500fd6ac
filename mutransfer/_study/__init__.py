"""Study files: what a `mutransfer sweep` tunes, on what, with which budget.

- :mod:`mutransfer._study.schema`: the sections, each field declared once (default, check, help);
- :mod:`mutransfer._study.search_space`: the ``search_space`` section;
- :mod:`mutransfer._study.resolve`: defaults and checks that involve several fields or the data;
- :mod:`mutransfer._study.files`: reading a file (or the built-in default), CLI overrides, ``parse_study``.

Every field except ``name``, ``problem.name``, ``proxy_K``, ``target_K`` and
``search_space`` has a default (docs/sweep.md).
"""

from mutransfer._study.files import (
    _UNSET,
    DEFAULT_STUDY,
    OVERRIDES,
    Override,
    default_study_text,
    load_study,
    parse_study,
    read_study_mapping,
    study_from_yaml_text,
)
from mutransfer._study.schema import (
    BudgetSpec,
    Distribution,
    OperatorSpec,
    ProblemSpec,
    ResourcesSpec,
    SearchSpec,
    Study,
    TargetSpec,
    TrackingSpec,
    TrainingSpec,
)
from mutransfer._study.search_space import SEARCHABLE

__all__ = [
    "BudgetSpec",
    "DEFAULT_STUDY",
    "Distribution",
    "OVERRIDES",
    "OperatorSpec",
    "Override",
    "ProblemSpec",
    "ResourcesSpec",
    "SEARCHABLE",
    "SearchSpec",
    "Study",
    "TargetSpec",
    "TrackingSpec",
    "TrainingSpec",
    "_UNSET",
    "default_study_text",
    "load_study",
    "parse_study",
    "read_study_mapping",
    "study_from_yaml_text",
]
