"""The conformance kit over every built-in family and documented factory: docs/byo.md's table, from its JSON.

Runs ``mutransfer check-operator FACTORY --dim D --options '{layers: 2}' --json`` for each row (one process each,
in the working directory, so a factory file there, such as docs/byo.md's ``neuralop_fno.py``, is found), keeps
each result as ``OUT/<factory>_<D>d.json`` and prints the Markdown table::

    python benchmarks/check_operator_table.py --out docs/results/check_operator
    python benchmarks/check_operator_table.py --table-from docs/results/check_operator   # print it again
    python benchmarks/check_operator_table.py --raw-k-input --out docs/results/check_operator_raw

``--raw-k-input`` runs the kit in this process with its K curves on the raw input (``check_operator(...,
low_pass=False)``), to measure what the low-pass below the base's K removes (mutransfer._diagnostics.operator_check
.below_modes); its seconds are not the command's.

A factory whose module cannot be imported here (neuraloperator not installed, no ``neuralop_fno.py`` in the
working directory) is left out, said on stderr.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from mutransfer.errors import UserInputError
from operators.errors import OperatorConfigError

ROWS = (
    ("fno", 1),
    ("fno", 2),
    ("fno", 3),
    ("galerkin", 1),
    ("ono", 1),
    ("gnot", 1),
    ("mutransfer.neuralop:fno1d", 1),
    ("mutransfer.neuralop:fno2d", 2),
    ("mutransfer.neuralop:tfno2d", 2),
    ("mutransfer.neuralop:fno3d", 3),
    ("neuralop_fno:build", 2),
)


def _file(out: Path, factory: str, dim: int) -> Path:
    return out / f"{factory.replace(':', '_').replace('.', '_')}_{dim}d.json"


def _raw(factory: str, dim: int) -> dict:
    """The kit in this process on the raw input's K curves (its result as the command's JSON)."""
    from mutransfer._diagnostics.operator_check import check_operator  # noqa: PLC0415 -- only for this mode
    from mutransfer.cli._check_operator_cmd import load_named_factory  # noqa: PLC0415

    options: dict[str, object] = {"layers": 2}
    build = load_named_factory(factory, dim, options)
    result = check_operator(build, name=factory, dim=dim, options=options, low_pass=False).as_dict()
    result["command"] = f"check_operator({factory!r}, dim={dim}, options={options}, low_pass=False)"
    return result


def run(out: Path, raw: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for factory, dim in ROWS:
        argv = ["mutransfer", "check-operator", factory, "--dim", str(dim), "--options", "{layers: 2}", "--json"]
        start = time.perf_counter()
        if raw:
            try:
                result = _raw(factory, dim)
            except (UserInputError, OperatorConfigError) as exc:  # a factory not importable here: left out, said
                print(f"{factory} --dim {dim}: left out ({exc})", file=sys.stderr)
                continue
        else:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode not in (0, 1):
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                print(f"{factory} --dim {dim}: left out ({last})", file=sys.stderr)
                continue
            result = json.loads(done.stdout)
            result["command"] = " ".join(argv[:-1]).replace("{layers: 2}", "'{layers: 2}'")
        seconds = time.perf_counter() - start
        result["seconds"] = round(seconds, 1)
        _file(out, factory, dim).write_text(json.dumps(result, indent=1))
        print(f"{factory} --dim {dim}: {'PASS' if result['passed'] else 'FAIL'} ({seconds:.0f} s)", file=sys.stderr)


def _cell(curves: list[dict], axis: str, rule: str) -> str:
    c = next((c for c in curves if c["axis"] == axis and c["rule"] == rule), None)
    if c is None:
        return "—"
    return f"{c['slope']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}] {c['verdict']}".replace("-", "−")


def table(out: Path) -> str:
    lines = [
        "| factory | D | width, μP | width, off | K, μP (÷ rule) | K, wrong rule | verdict | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for factory, dim in ROWS:
        path = _file(out, factory, dim)
        if not path.exists():
            print(f"{factory} --dim {dim}: no result in {out} (left out when it ran)", file=sys.stderr)
            continue
        r = json.loads(path.read_text())
        cells = [
            _cell(r["curves"], a, rule)
            for a, rule in (("width", "mup"), ("width", "off"), ("K", "mup"), ("K", "wrong"))
        ]
        verdict = "PASS" if r["passed"] else "**FAIL**"
        lines.append(f"| `{factory}` | {dim} | {' | '.join(cells)} | {verdict} | {r.get('seconds', '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="folder for the JSON results (runs every row)")
    p.add_argument("--table-from", type=Path, help="print the table of a folder of stored results and exit")
    p.add_argument("--raw-k-input", action="store_true", help="K curves on the raw input, in this process")
    args = p.parse_args(argv)
    if args.table_from is None and args.out is None:
        p.error("give --out (run) or --table-from (print)")
    if args.table_from is None:
        run(args.out, args.raw_k_input)
    print(table(args.table_from or args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
