"""The sweep service behind `mutransfer sweep`: steps over typed values (docs/architecture.md).

- :mod:`~mutransfer._sweep.context`      the records the steps pass along (TrialRecord, ProxyResults, …) and the options
- :mod:`~mutransfer._sweep.session`      what flows between the steps: Prepared, the open Session, Made
- :mod:`~mutransfer._sweep.prepare`      validation before any compute; resources, memory, resume consistency
- :mod:`~mutransfer._sweep.proxies`      the proxy search (Ray Tune: TPE/random/grid + ASHA)
- :mod:`~mutransfer._sweep.rescale`      the transfer of the best proxy to the target (operators.transfer)
- :mod:`~mutransfer._sweep.gate`         the optional coordinate-check gate
- :mod:`~mutransfer._sweep.train_target` the target phase; :mod:`~mutransfer._sweep.target` its Ray Train worker loop,
  :mod:`~mutransfer._sweep.target_run` its run on Ray (Ray Train, or one Ray actor for one CPU worker:
  :mod:`~mutransfer._sweep._target_actor`; started with its order or early, :mod:`~mutransfer._sweep.early_target`)
- :mod:`~mutransfer._sweep.finish`       the report phase; :mod:`~mutransfer._sweep.report` the report itself
- :mod:`~mutransfer._sweep.runner`       the orchestrator (:func:`run_sweep`)
- :mod:`~mutransfer._sweep.trial`        the proxy trial (Tune function trainable) and the fault-injection hook
- :mod:`~mutransfer._sweep.search`       Tune search space, searcher, scheduler
- :mod:`~mutransfer._tracking.runs`     MLflow: parent / trial / target runs, `studies` table, `ui`
- :mod:`~mutransfer._study_folder.state`        the per-study directory and resume state

Ray, MLflow and the HTML page's helpers (pandas, matplotlib) are imported in the functions that use them
(each such import says why), so loading a study stays cheap.
"""

from mutransfer._sweep.context import SweepError, SweepOptions
from mutransfer._sweep.prepare import prepare
from mutransfer._sweep.runner import run_sweep

__all__ = ["SweepError", "SweepOptions", "prepare", "run_sweep"]
