"""The sweep service behind `mutransfer sweep`.

- :mod:`~mutransfer.sweep.search`   Tune search space, TPE/random/grid searcher, ASHA scheduler
- :mod:`~mutransfer.sweep.trial`    the proxy trial (Tune function trainable) and the fault-injection hook
- :mod:`~mutransfer.sweep.target`   target training with Ray Train (TorchTrainer, DDP)
- :mod:`~mutransfer.sweep.tracking` MLflow: parent / trial / target runs, `studies` table, `ui`
- :mod:`~mutransfer.sweep.report`   transfer report (text, JSON, PNG)
- :mod:`~mutransfer.sweep.state`    the per-study directory and resume state
- :mod:`~mutransfer.sweep.runner`   orchestration (:func:`run_sweep`)

Ray, MLflow and torch are imported lazily, so loading a study stays cheap.
"""

from mutransfer.sweep.runner import SweepError, SweepOptions, prepare, run_sweep

__all__ = ["SweepError", "SweepOptions", "prepare", "run_sweep"]
