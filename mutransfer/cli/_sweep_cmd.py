"""`mutransfer sweep`, `mutransfer studies`: the sweep service's commands (`mutransfer ui` is cli/_ui_cmd.py)."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from typing import TYPE_CHECKING

from mutransfer._config import smoke
from mutransfer._config.checks import (
    MAX_VERIFY_POINTS,
    MAX_VERIFY_SEEDS,
    VERIFY_POINTS,
    VERIFY_SEEDS,
    check_verify_points,
)
from mutransfer._config.executors import EXECUTORS
from mutransfer._config.flags import flag_kwargs
from mutransfer._study.files import OVERRIDES, declared, load_study
from mutransfer._study.schema import MAX_TRIALS
from mutransfer._sweep.endpoints import check_store
from mutransfer._tracking.listings import format_studies, list_studies
from mutransfer._tracking.runs import resolve_tracking_uri
from mutransfer.cli._common import model_name, positive_int_at_most, print_json

if TYPE_CHECKING:
    from mutransfer._api.spec import StudySpec
    from mutransfer._api.strategies import Strategy

EXIT_SWEEP_FAILED = 1


def add_parser(subparsers) -> None:
    _add_sweep(subparsers)
    _add_studies(subparsers)


# --------------------------------------------------------------------------- sweep


def _add_sweep(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="tune small proxies with Ray Tune, transfer the winner by muP, train the target (Ray Train, or one Ray actor for one CPU worker), log to MLflow",
        description="Run a study: sweep hyperparameters on small proxies (an FNO with K = proxy_K, and/or any "
        "operator at width operator.width; TPE + ASHA), rescale the best to the target (K = target_K, width = "
        "target_width) by the muP rules, train the target once, evaluate it on the test split and record everything "
        "in MLflow. The trainings run where --executor says: on Ray (Ray Tune trials, the target on Ray Train or one "
        "Ray actor) by default, or in this process. Without --study the built-in quick study runs (Burgers 1D, its "
        "proxies as batched populations in this process, under half a minute on a 2-core laptop CPU: README.md). "
        "Flags override the study file and are reported.",
    )
    groups = {
        name: p.add_argument_group(title)
        for name, title in (
            ("study", "the study (each flag overrides the study file; the value shown is the built-in quick study's)"),
            ("search", "the search"),
            ("target", "the target"),
            ("checks", "measuring the transfer"),
            ("store", "the study folder and the tracking store"),
            ("cluster", "the cluster"),
            ("output", "output"),
        )
    }
    groups["study"].add_argument(
        "--study", metavar="FILE", help="study YAML file (default: the built-in quick study = studies/quick.yaml)"
    )
    _add_override_flags(groups)
    groups["cluster"].add_argument(
        "--address", help="Ray cluster to use: auto or ray://HOST:PORT (default: start a local Ray)"
    )
    groups["cluster"].add_argument(
        "--executor",
        choices=EXECUTORS,
        default=None,
        help="where the trainings run (default: the study's resources.executor, ray unless it says otherwise; the "
        "built-in quick study says population, which --address takes to ray-population): ray (Ray Tune trials, the target on Ray Train or, for one CPU "
        "worker, one Ray actor), inprocess (one at a "
        "time in this process, no Ray: the same trials and results), population (in this process, a window of "
        "proxies of one shape as one batched model) or ray-population (those batched models as Ray tasks, a "
        "window's at once, locally or on --address; the target as ray's)",
    )
    store = groups["store"]
    store.add_argument("--runs-dir", default=None, help="where study directories live (default: ./mutransfer-runs)")
    store.add_argument(
        "--resume", action="store_true", help="continue the study of the same name after an interruption"
    )
    store.add_argument(
        "--rebuild-state",
        action="store_true",
        help="with --resume: rebuild a lost or damaged state.json from the study's journal of trials (and a lost or "
        "damaged journal from the study's MLflow runs), keeping every finished trial and reusing the study's MLflow "
        "runs (docs/robustness.md)",
    )
    checks = groups["checks"]
    checks.add_argument(
        "--coord-check",
        action="store_true",
        help="run the coordinate check across K before the target and report its verdict (it never stops the sweep: "
        "it misclassifies known rules, docs/results.md; --verify measures whether the optimum moved)",
    )
    checks.add_argument(
        "--verify",
        action="store_true",
        help="after the target, train it at --verify-points LRs 0.25 decades apart around the transferred LR "
        "and report how far the target's own optimum is (distance in decades, regret)",
    )
    checks.add_argument(
        "--verify-points",
        type=positive_int_at_most(MAX_VERIFY_POINTS),
        default=VERIFY_POINTS,
        metavar="N",
        help=f"LRs of the --verify grid, the transferred one among them (default: {VERIFY_POINTS}, +-0.5 decades; >= 3)",
    )
    checks.add_argument(
        "--verify-seeds",
        type=positive_int_at_most(MAX_VERIFY_SEEDS),
        default=VERIFY_SEEDS,
        metavar="S",
        help=f"seeds per --verify LR (default: {VERIFY_SEEDS}; the t CI of the distance needs >= 2)",
    )
    checks.add_argument(
        "--baseline",
        choices=("direct",),
        help="direct: run the same search (searcher, ASHA, trials, epochs) at the target's size and report "
        "muTransfer vs direct tuning: error and cost (the paper's Table 1) (default: none)",
    )
    groups["target"].add_argument(
        "--register",
        metavar="NAME",
        type=model_name,
        default=None,
        help="register the trained target in MLflow's model registry as a new version of NAME "
        "(models:/NAME/<version>; needs a database-backed store such as sqlite) (default: not registered)",
    )
    search = groups["search"]
    search.add_argument(
        "--warm-start",
        metavar="STUDY",
        default=None,
        help="seed the search with the best trials of an earlier study (a study folder, a study name under "
        "--runs-dir, or a study name in the tracking store), rescaled by muP to this study's proxy size "
        "(default: a cold start)",
    )
    search.add_argument(
        "--warm-start-top",
        type=positive_int_at_most(MAX_TRIALS),
        default=None,
        metavar="N",
        help="how many of its best completed trials seed the search (default: max(1, num_trials // 4))",
    )
    search.add_argument(
        "--warm-start-any",
        action="store_true",
        help="accept a --warm-start study of another problem or operator (default: refused)",
    )
    groups["output"].add_argument("--json", action="store_true", help="print the transfer report as JSON")
    p.set_defaults(run=run_sweep_cmd)


#: the --help group of each override flag (the others are the study's)
_OVERRIDE_GROUPS = {
    "num_trials": "search",
    "epochs": "search",
    "ladder": "search",
    "ladder_keep": "search",
    "top_k": "search",
    "target_epochs": "target",
    "tracking_uri": "store",
}


def _add_override_flags(groups: dict) -> None:
    """One flag per entry of mutransfer._study.OVERRIDES, typed and described by the field's own declaration; the
    default shown is the built-in quick study's value (what runs without --study)."""

    quick, _ = load_study(None)
    values = quick.to_dict()
    for key, (path, flag) in OVERRIDES.items():
        spec, _default = declared(path)
        value: object = values
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        shown = "unset" if value is None else " ".join(map(str, value)) if isinstance(value, list) else value
        help_text = f"{spec.help} (overrides {path}; default: {shown})"
        groups[_OVERRIDE_GROUPS.get(key, "study")].add_argument(
            flag, dest=key, help=help_text, **flag_kwargs(spec, key)
        )


def command_spec(args: argparse.Namespace) -> StudySpec:
    """The study the flags ask for, as a spec carrying the command (its study file, overrides, --resume,
    --rebuild-state, --json: mutransfer._api.spec.CommandLine); a bad file or flag raises here, worded by the flag."""
    from mutransfer._api.spec import CommandLine, StudySpec  # noqa: PLC0415 -- deferred: as run_sweep_cmd's imports

    overrides = {key: getattr(args, key) for key in OVERRIDES}
    if smoke.smoke():
        overrides.update(
            num_trials=smoke.capped(overrides["num_trials"], smoke.TRIALS),
            epochs=smoke.capped(overrides["epochs"], smoke.EPOCHS),
            target_epochs=smoke.capped(overrides["target_epochs"], smoke.EPOCHS),
        )
        smoke.say("sweep", f"{overrides['num_trials']} trials, {smoke.EPOCHS} epoch each and for the target")
    command = CommandLine(args.study, overrides, args.resume, args.rebuild_state, args.json)
    return StudySpec._of_command(command)


def command_strategies(args: argparse.Namespace) -> list[Strategy]:
    """The Python API's strategy objects the flags ask for (--verify, --baseline direct, --warm-start, --coord-check)."""
    from mutransfer._api.strategies import CoordCheck, DirectBaseline, Verify, WarmStart  # noqa: PLC0415 -- deferred: as run_sweep_cmd's imports

    check_verify_points(args.verify_points)  # the flag's words, before its object's; checked with or without --verify
    asked: list[Strategy] = []
    if args.verify:
        asked.append(Verify(points=args.verify_points, seeds=args.verify_seeds))
    if args.baseline == "direct":
        asked.append(DirectBaseline())
    if args.warm_start is not None:
        asked.append(WarmStart(args.warm_start, top=args.warm_start_top, any_source=args.warm_start_any))
    if args.coord_check:
        asked.append(CoordCheck())
    return asked


def run_sweep_cmd(args: argparse.Namespace) -> int:
    """The flags made into a spec and strategy objects, run through the Python API (:func:`mutransfer.create_study`;
    :meth:`~mutransfer.Study.report` runs every phase left), the report printed."""
    from mutransfer._api.study import create_study  # noqa: PLC0415 -- deferred: heavy imports (the sweep runner: ray, optuna, mlflow), `mutransfer --help` stays fast
    from mutransfer._study_folder.state import DEFAULT_RUNS_DIR  # noqa: PLC0415
    from mutransfer._sweep.runner import SweepError  # noqa: PLC0415

    try:
        study = create_study(
            command_spec(args), storage=args.runs_dir or DEFAULT_RUNS_DIR, executor=args.executor,
            strategies=command_strategies(args), register=args.register, ray_address=args.address, quiet=False,
        )  # fmt: skip
        # Ray Tune prints tables to stdout: keep stdout for the report (--json stays parseable).
        with contextlib.redirect_stdout(sys.stderr), study:
            report = study.report()
    except SweepError as exc:
        print(f"mutransfer sweep: failed: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_SWEEP_FAILED
    except KeyboardInterrupt:
        again = " ".join(a for a in _resume_hint(args))
        print(f"mutransfer sweep: interrupted; the study is saved: continue it with `{again}`", file=sys.stderr)
        return 130
    print(report.to_json() if args.json else report.to_text())
    return 0


def _resume_hint(args: argparse.Namespace) -> list[str]:
    """The command that continues this study: the study file, every override given, the runs dir (shell-quoted)."""

    hint = ["mutransfer", "sweep", "--resume"]
    if args.study:
        hint += ["--study", args.study]
    given = [(flag, getattr(args, key, None)) for key, (_path, flag) in OVERRIDES.items()]
    given += [
        ("--runs-dir", args.runs_dir),
        ("--address", args.address),
        ("--coord-check", args.coord_check),
        ("--verify", args.verify),
        ("--baseline", args.baseline),
        ("--warm-start", args.warm_start),
        ("--warm-start-top", args.warm_start_top),
        ("--warm-start-any", args.warm_start_any),
    ]
    if args.verify:
        given += [("--verify-points", args.verify_points), ("--verify-seeds", args.verify_seeds)]
    for flag, value in given:
        if value is None or value is False:
            continue
        hint += [flag] if value is True else [flag, *map(str, value)] if isinstance(value, list) else [flag, str(value)]
    return [shlex.quote(h) for h in hint]


# --------------------------------------------------------------------------- studies


def _add_studies(subparsers) -> None:
    p = subparsers.add_parser(
        "studies",
        help="list and compare the studies recorded in MLflow",
        description="One row per study (MLflow parent run): status, best proxy error, target error, K, compute.",
    )
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db in this directory)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(run=run_studies_cmd)


def run_studies_cmd(args: argparse.Namespace) -> int:
    uri = resolve_tracking_uri(args.tracking_uri)
    check_store(uri)
    rows = list_studies(uri)
    if args.json:
        print_json(rows)
    else:
        print(format_studies(rows))
    return 0
