"""The Python API (re-exported by :mod:`mutransfer`): a study spec, a study, and what a study hands back."""

from mutransfer._api.results import Report, TargetResult, TransferRecord, TrialResult
from mutransfer._api.spec import StudySpec
from mutransfer._api.strategies import CoordCheck, DirectBaseline, Verify, WarmStart
from mutransfer._api.study import Study, create_study, load_study

__all__ = [
    "CoordCheck",
    "DirectBaseline",
    "Report",
    "Study",
    "StudySpec",
    "TargetResult",
    "TransferRecord",
    "TrialResult",
    "Verify",
    "WarmStart",
    "create_study",
    "load_study",
]
