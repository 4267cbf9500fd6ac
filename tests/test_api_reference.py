"""The API reference (docs/reference): Sphinx builds it from the public API's docstrings, warnings as errors.

``python -m sphinx -W --keep-going -b html docs/reference <out>`` (the ``docs`` extra; the ``test`` extra has
Sphinx too, so CI builds it). Every build here writes into a temporary folder, never into the repository. A second
build of a copy with a name that does not exist shows the check fails; the docstring checker below (an ``Example:``
section for every public name, an ``Args:`` section naming every argument) is shown to report a planted function.
"""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path

import mutransfer as mt
from tests.repo_paths import ROOT

REFERENCE = ROOT / "docs" / "reference"

#: the public names that are not callables with a Google-style docstring of their own
NOT_CHECKED = {"UserInputError", "__version__"}

#: the anchors autodoc writes for the entries the reference must have (a missing one: an entry not generated)
ENTRIES = [f"mutransfer.{name}" for name in mt.__all__] + [
    "mutransfer.Study.optimize",
    "mutransfer.Study.best_params",
    "mutransfer.Study.train_target",
]


def build(source: Path, out: Path) -> subprocess.CompletedProcess:
    """The reference's build, as the docs and CI run it."""
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_reference_builds_without_warnings(tmp_path):
    result = build(REFERENCE, tmp_path / "html")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    page = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    for name in ("create_study", "optimize", "best_params", "train_target"):
        assert name in page, name
    missing = [entry for entry in ENTRIES if f'id="{entry}"' not in page]
    assert not missing, f"entries not generated: {missing}"
    assert not list(REFERENCE.glob("_build")), "the build wrote into docs/reference"


def test_reference_build_fails_on_a_missing_name(tmp_path):
    source = tmp_path / "reference"
    shutil.copytree(REFERENCE, source, ignore=shutil.ignore_patterns("_build", "__pycache__"))
    with (source / "index.rst").open("a", encoding="utf-8") as f:
        f.write("\n.. autofunction:: mutransfer.no_such_function\n")
    result = build(source, tmp_path / "html")
    assert result.returncode != 0, result.stdout[-3000:]
    assert "no_such_function" in result.stderr, result.stderr[-3000:]


# ---- the docstrings ---------------------------------------------------------------------------------------------


def _section(doc: str, title: str) -> str | None:
    """The body of the Google-style section ``title`` (its indented lines), None when ``doc`` has none."""
    match = re.search(rf"^{title}:[ \t]*\n((?:[ \t]+.*\n|[ \t]*\n)*)", doc + "\n", flags=re.M)
    return match.group(1) if match else None


def _arguments(fn) -> list[str]:
    """``fn``'s arguments besides self and cls."""
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]


def docstring_problems(name: str, fn, *, example: bool = True) -> list[str]:
    """What ``fn``'s docstring lacks: an ``Example:`` section (when ``example``), and an ``Args:`` section naming
    each of its arguments (when it takes any)."""
    doc = inspect.getdoc(fn)
    if not doc:
        return [f"{name}: no docstring"]
    problems = []
    if example and _section(doc, "Examples?") is None:
        problems.append(f"{name}: no Example: section")
    if inspect.isroutine(fn) and _arguments(fn):
        args = _section(doc, "Args")
        if args is None:
            problems.append(f"{name}: takes {', '.join(_arguments(fn))} but has no Args: section")
        else:
            for arg in _arguments(fn):
                if not re.search(rf"^[ \t]+\**{arg}( \(.*\))?:", args, flags=re.M):
                    problems.append(f"{name}: Args: does not name {arg}")
    return problems


def _public_methods(cls: type) -> dict[str, object]:
    """``cls``'s own public methods (class and static ones included; properties are not methods)."""
    methods = {}
    for attr, value in vars(cls).items():
        if attr.startswith("_") or isinstance(value, property):
            continue
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        if inspect.isfunction(value):
            methods[attr] = value
    return methods


def test_public_docstrings_have_examples_and_args():
    problems = []
    for name in sorted(set(mt.__all__) - NOT_CHECKED):
        problems += docstring_problems(name, getattr(mt, name))
    for cls in (mt.Study, mt.StudySpec):
        for attr, method in _public_methods(cls).items():
            if _arguments(method):
                problems += docstring_problems(f"{cls.__name__}.{attr}", method, example=False)
    assert not problems, "\n".join(problems)


def test_docstring_checker_reports_a_planted_function():
    def without_example(path: str, strict: bool = False) -> None:
        """Read ``path``.

        Args:
            path: a file.
            strict: refuse a partial one.
        """

    def without_args(path: str, strict: bool = False) -> None:
        """Read ``path``.

        Example:
            >>> without_args("a.txt")  # doctest: +SKIP
        """

    def half_args(path: str, strict: bool = False) -> None:
        """Read ``path``.

        Args:
            path: a file.

        Example:
            >>> half_args("a.txt")  # doctest: +SKIP
        """

    def complete(path: str, strict: bool = False) -> None:
        """Read ``path``.

        Args:
            path: a file.
            strict (bool): refuse a partial one.

        Example:
            >>> complete("a.txt")  # doctest: +SKIP
        """

    assert docstring_problems("without_example", without_example) == ["without_example: no Example: section"]
    assert docstring_problems("without_args", without_args) == [
        "without_args: takes path, strict but has no Args: section"
    ]
    assert docstring_problems("half_args", half_args) == ["half_args: Args: does not name strict"]
    assert docstring_problems("complete", complete) == []
    assert docstring_problems("undocumented", lambda: None) == ["undocumented: no docstring"]
