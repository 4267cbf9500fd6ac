"""The public surface of the mutransfer package, counted: its modules whose dotted path has no "_"-prefixed part,
and their public names: a module's ``__all__`` where it declares one (read by importing it: the package and
``mutransfer.data`` export names loaded from private modules), else its top-level names (functions, classes,
assignments) that do not start with "_".

    python3 benchmarks/public_names.py [REPO_ROOT]

docs/architecture.md ("Public and private") quotes its figures.
"""

import ast
import importlib
import sys
from pathlib import Path

root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
sys.path.insert(0, str(root))  # the __all__ of this tree's modules, not an installed copy's
mods = names = 0
for f in sorted((root / "mutransfer").rglob("*.py")):
    parts = f.relative_to(root).with_suffix("").parts
    if parts[-1] in ("__init__", "__main__"):
        parts = parts[:-1]
    if any(p.startswith("_") for p in parts):
        continue
    tree = ast.parse(f.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    found.add(t.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
    pub = {n for n in found if not n.startswith("_")}
    if "__all__" in found:
        pub = set(importlib.import_module(".".join(parts)).__all__)
    mods += 1
    names += len(pub)
print(f"{mods} public modules, {names} public top-level names")
