"""The command line that runs a study again: the summary's next commands are complete and paste as printed.

Only what defines the study is kept (its file, the flags that override it, where its runs and trainings go); a
check or strategy flag and ``--name`` are added by the suggestion itself.
"""

from __future__ import annotations

import os

from mutransfer._config.executors import chosen_executor
from mutransfer._study.files import OVERRIDES
from mutransfer._sweep.context import SweepOptions

#: overrides a repeated command leaves out: the suggestion names the new study itself
_NOT_REPEATED = ("name",)


def repeat_command(options: SweepOptions, study_executor: str) -> list[str] | None:
    """``mutransfer sweep …`` as argv for the study ``options`` ran (``--executor`` only where it is not the study's
    own ``study_executor``); None when the study came as text (the Python API: there is no file to name)."""
    if options.study_text is not None:
        return None
    argv = ["mutransfer", "sweep"]
    if options.study_path is not None:
        argv += ["--study", os.path.abspath(options.study_path)]
    for key, value in options.overrides.items():
        if value is None or key in _NOT_REPEATED:
            continue
        argv.append(OVERRIDES[key][1])
        argv += [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
    if options.runs_dir is not None:
        argv += ["--runs-dir", os.path.abspath(options.runs_dir)]
    if options.address is not None:
        argv += ["--address", options.address]
    if options.executor not in (None, chosen_executor(None, study_executor, options.address)):
        argv += ["--executor", options.executor]
    return argv
