"""mypy for CI and pre-commit: ``mypy --strict operators`` with no error, ``mypy mutransfer`` none beyond the baseline.

operators/ is strict-clean: any error there fails the run, and so does a baseline that lists one.
The baseline (.ci/mypy-baseline.txt) applies to mutransfer/ only: it lists the errors mypy reported
there when it was introduced, one per line as ``path: [code] message`` (no line numbers, so edits
above an error do not move it). A run fails on any mutransfer/ error not in the baseline; errors that
disappeared are reported so the baseline can shrink (``python .ci/mypy_check.py --update``). The
baseline only shrinks: never add to it by hand.

    python .ci/mypy_check.py            # check
    python .ci/mypy_check.py --update   # rewrite the baseline from the current errors
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / ".ci" / "mypy-baseline.txt"
STRICT = "operators/"  # no baseline: every error under it fails the run
LINE = re.compile(r"^(?P<path>[^:]+):\d+: error: (?P<message>.*?)\s+\[(?P<code>[a-z-]+)\]$")


def current_errors() -> Counter[str]:
    """mypy's errors on operators/ (--strict) and mutransfer/ (pyproject.toml's settings), without line numbers."""
    runs = (["--strict", "operators"], ["--follow-imports=silent", "mutransfer"])
    outs = [
        subprocess.run(
            [sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout
        for args in runs
    ]
    out = "\n".join(outs)
    keys: Counter[str] = Counter()
    for line in out.splitlines():
        match = LINE.match(line.strip())
        if match:
            keys[f"{match['path']}: [{match['code']}] {match['message']}"] += 1
    if not keys and out.count("Success") < len(runs):
        raise SystemExit(f"mypy did not run:\n{out}")
    return keys


def main(argv: list[str]) -> int:
    errors = current_errors()
    if "--update" in argv:
        lines = sorted(k for k, n in errors.items() for _ in range(n) if not k.startswith(STRICT))
        BASELINE.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        print(f"baseline: {len(lines)} errors written to {BASELINE.relative_to(ROOT)}")
    allowed = Counter(BASELINE.read_text(encoding="utf-8").splitlines()) if BASELINE.exists() else Counter()
    listed_strict = sorted(k for k in allowed if k.startswith(STRICT))
    for key in listed_strict:
        print(f"the baseline lists an error under {STRICT}, which must stay strict-clean (remove the line): {key}")
    baselined = Counter({k: n for k, n in allowed.items() if not k.startswith(STRICT)})
    new = errors - baselined
    gone = allowed - errors
    for key in new:
        why = f"{STRICT} is strict-clean" if key.startswith(STRICT) else "the baseline only shrinks"
        print(f"new mypy error (fix it; {why}): {key}")
    if gone:
        print(f"{sum(gone.values())} baseline errors are fixed: run `python .ci/mypy_check.py --update` to drop them")
    total = sum(errors.values())
    strict = sum(n for k, n in errors.items() if k.startswith(STRICT))
    print(
        f"mypy: {total} errors ({strict} of them in operators/, --strict), "
        f"{sum(allowed.values())} in the baseline, {sum(new.values())} new"
    )
    return 1 if new or listed_strict else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
