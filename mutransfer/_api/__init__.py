"""The Python API (re-exported by :mod:`mutransfer`): a study spec, a study, and what a study hands back."""

from mutransfer._api.results import Report, TargetResult, TransferRecord, TrialResult
from mutransfer._api.spec import StudySpec
from mutransfer._api.study import Study, create_study, load_study

__all__ = [
    "Report",
    "Study",
    "StudySpec",
    "TargetResult",
    "TransferRecord",
    "TrialResult",
    "create_study",
    "load_study",
]
