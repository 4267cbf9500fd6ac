"""Reading a finished (or running) study's folder back: the ``mutransfer report`` page and the ``trials`` table.

- :mod:`~mutransfer._reporting.study_files`  the study folder (state.json, report.json, study.yaml, trial histories)
- :mod:`~mutransfer._reporting.trials_table` one pandas row per proxy trial
- :mod:`~mutransfer._reporting.figures`      the figures (Optuna's matplotlib plots, pandas plots) as PNG bytes
- :mod:`~mutransfer._reporting.html`         the self-contained HTML page

Everything is built from the files in the study folder, never from MLflow, so a copied folder reports offline.
"""
