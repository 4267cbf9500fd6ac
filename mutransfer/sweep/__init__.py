"""The sweep service behind `mutransfer sweep`: phases over one context (docs/architecture.md).

- :mod:`~mutransfer.sweep.context`      the records the phases pass along (TrialRecord, ProxyResults, …) and SweepContext
- :mod:`~mutransfer.sweep.prepare`      validation before any compute; resources, memory, resume consistency
- :mod:`~mutransfer.sweep.proxies`      the proxy search (Ray Tune: TPE/random/grid + ASHA)
- :mod:`~mutransfer.sweep.rescale`      the transfer of the best proxy to the target (operators.transfer)
- :mod:`~mutransfer.sweep.gate`         the optional coordinate-check gate
- :mod:`~mutransfer.sweep.train_target` the target phase; :mod:`~mutransfer.sweep.target` its Ray Train worker loop,
  :mod:`~mutransfer.sweep.target_run` its run on Ray (Ray Train, or one Ray actor for one CPU worker:
  :mod:`~mutransfer.sweep._target_actor`; started with its order or early, :mod:`~mutransfer.sweep.early_target`)
- :mod:`~mutransfer.sweep.finish`       the report phase; :mod:`~mutransfer.sweep.report` the report itself
- :mod:`~mutransfer.sweep.runner`       the orchestrator (:func:`run_sweep`)
- :mod:`~mutransfer.sweep.trial`        the proxy trial (Tune function trainable) and the fault-injection hook
- :mod:`~mutransfer.sweep.search`       Tune search space, searcher, scheduler
- :mod:`~mutransfer.tracking.runs`     MLflow: parent / trial / target runs, `studies` table, `ui`
- :mod:`~mutransfer.study_folder.state`        the per-study directory and resume state

Ray, MLflow and the HTML page's helpers (pandas, matplotlib) are imported in the functions that use them
(each such import says why), so loading a study stays cheap.
"""

from mutransfer.sweep.context import SweepError, SweepOptions
from mutransfer.sweep.prepare import prepare
from mutransfer.sweep.runner import run_sweep

__all__ = ["SweepError", "SweepOptions", "prepare", "run_sweep"]
