"""The names of the executors a study's trainings run on (mutransfer._sweep._executors), declared once: the CLI's
``--executor`` and ``mutransfer.create_study(executor=...)`` offer these."""

#: ``ray``: Ray Tune trials, a Ray Train target (one Ray actor for one CPU worker), Ray tasks (the default);
#: ``inprocess``: one at a time in this process;
#: ``population``: in this process, the trials of a search's window trained together as one batched model;
#: ``ray-population``: on Ray, each of those batched models (and each trial that trains alone) one Ray task, all of a
#: window's at once; the target and the grids as ``ray``'s
EXECUTORS = ("ray", "inprocess", "population", "ray-population")
#: the executors whose trainings run on Ray (locally, or on the cluster of ``--address``)
ON_RAY = ("ray", "ray-population")
#: the executors that train a window's proxies as populations
POPULATION = ("population", "ray-population")
