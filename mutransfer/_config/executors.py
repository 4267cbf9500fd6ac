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
#: the executor on Ray that trains as each in-process one does: a study that says ``inprocess`` or ``population`` and
#: is sent to a cluster (``--address``) trains there this way
ON_RAY_AS = {"inprocess": "ray", "population": "ray-population"}


def chosen_executor(flag: str | None, study_says: str, address: str | None) -> str:
    """The executor a study runs on: ``--executor`` (``flag``) where given, else the study's ``resources.executor``,
    taken to the cluster of ``address`` (its Ray counterpart, :data:`ON_RAY_AS`) when it names one that trains in
    this process. A flag is never changed: ``--executor population --address …`` is refused where it is checked."""
    if flag is not None:
        return flag
    return ON_RAY_AS.get(study_says, study_says) if address is not None else study_says
