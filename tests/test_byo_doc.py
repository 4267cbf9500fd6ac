"""docs/byo.md ("Bring your own operator") runs top to bottom in a fresh folder: its files are written as the page
shows them, then its commands run in the order written (the pip install aside). ``MUTRANSFER_SMOKE=1`` shortens
the trainings (mutransfer.config.smoke); the sweep trains in process (``--executor inprocess``: the same study on
Ray, a user's module imported by every worker, is tests/sweep/test_user_operator.py's). neuraloperator 2.0's FNO is
tuned by `mutransfer sweep` here: the issue's "neuraloperator's FNO tuned the same way in CI"."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from tests.repo_paths import ROOT, smoke_env

PAGE = ROOT / "docs" / "byo.md"


def page_files() -> dict[str, str]:
    """The page's files: each code block right after a ``<!-- file: NAME -->`` line."""
    text = PAGE.read_text()
    return dict(re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", text, flags=re.S))


def page_commands() -> list[list[str]]:
    """The page's ```bash lines, in order, without comments and without `pip install`."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith(("#", "pip ")):
                commands.append(shlex.split(line))
    return commands


def test_the_page_has_its_files_and_commands():
    assert set(page_files()) == {"neuralop_fno.py", "facts.py", "darcy.yaml"}
    commands = page_commands()
    assert [c[:2] for c in commands] == [
        ["python", "facts.py"],
        ["mutransfer", "check-operator"],
        ["mutransfer", "sweep"],
        ["mutransfer", "data"],
        ["mutransfer", "evaluate"],
    ]


@pytest.mark.slow
def test_the_page_runs_top_to_bottom_in_a_fresh_folder(tmp_path):
    pytest.importorskip("neuralop")
    for name, text in page_files().items():
        (tmp_path / name).write_text(text)
    env = dict(smoke_env(tmp_path), TQDM_DISABLE="1")
    env.pop("PYTHONPATH", None)
    outputs = []
    for command in page_commands():
        args = [sys.executable, *command[1:]] if command[0] == "python" else [sys.executable, "-m", *command]
        if command[:2] == ["mutransfer", "sweep"]:  # in this process: Ray's part, a user's module in every worker,
            args += ["--executor", "inprocess"]  # is tests/sweep/test_user_operator.py's (saves ~20 s of CI)
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (" ".join(command), done.stderr[-3000:])
        outputs.append(done.stdout)
    facts, kit, sweep, _, evaluate = outputs
    assert "verdict: PASS" in kit
    assert "spectral (declared)" not in facts and re.search(
        r"model\.fno_blocks\.convs\.0\.weight\.tensor .* spectral", facts
    )
    assert "NeuralopFNO-2D K=8 width 32" in sweep
    assert "relative L2" in evaluate
