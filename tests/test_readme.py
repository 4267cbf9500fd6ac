"""The README runs top to bottom: Set up's main job, then every Quickstart command, in the order written, in a
fresh folder (issue "The first five minutes", item 1).

The commands are the README's own text, extracted from it here. ``MUTRANSFER_SMOKE=1`` shortens the trainings
(one epoch, two trials, at most 24 generated samples: mutransfer.config.smoke); `mutransfer ui` and `mutransfer dashboard`,
servers, are stopped once they have printed their links.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from tests.repo_paths import ROOT, smoke_env

pytestmark = pytest.mark.slow


def _bash_blocks(section: str) -> list[str]:
    """The ```bash blocks of the README section titled ``section`` (a "## " heading)."""
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```bash\n(.*?)```", text[start : end if end > 0 else None], flags=re.S)


def readme_commands() -> list[list[str]]:
    """Set up's first command's `mutransfer` part, then the Quickstart's commands, as argument lists."""
    setup = _bash_blocks("Set up")[0]
    first = next(line for line in setup.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    commands = [part.strip() for part in first.split("&&") if part.strip().startswith("mutransfer")]
    for line in _bash_blocks("Quickstart")[0].splitlines():
        line = line.split("  #", 1)[0].strip()  # a trailing comment
        if line and not line.startswith("#"):
            commands.append(line)
    return [shlex.split(c) for c in commands]


def test_the_readme_commands_are_found():
    commands = readme_commands()
    assert commands[0][:2] == ["mutransfer", "sweep"] and len(commands) >= 10
    assert all(c[0] == "mutransfer" for c in commands), "a Quickstart line that is not a mutransfer command"


#: the README's commands that start a server: (port, the name its link line starts with)
SERVERS = {"ui": (5091, "MLflow UI"), "dashboard": (8091, "optuna-dashboard")}


def test_the_readme_runs_top_to_bottom_in_a_fresh_folder(tmp_path):
    env = smoke_env(tmp_path)
    exe = [sys.executable, "-m", "mutransfer"]
    for command in readme_commands():
        args = [*exe, *command[1:]]
        if command[1] in SERVERS:  # a server: it must come up and print its link, then it is stopped
            port, shown = SERVERS[command[1]]
            args += ["--port", str(port)]
            proc = subprocess.Popen(
                args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            try:
                line = proc.stdout.readline()
            finally:
                proc.terminate()
                proc.wait(timeout=30)
            assert line.startswith(f"{shown}: http://127.0.0.1:{port}/"), (command, line, proc.stderr.read()[-2000:])
            continue
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, (" ".join(command), done.stderr[-3000:])
