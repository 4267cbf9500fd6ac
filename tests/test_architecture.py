"""The code's shape: no import cycles, no oversized modules, operator kinds decided by the registry.

The import graph is read with the standard library's ``ast`` from the source (no
import runs): every ``import``/``from … import`` at any level of a module counts, so
a cycle hidden inside a function is still a cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.repo_paths import ROOT

PACKAGES = ("operators", "mutransfer")
MAX_LINES = 500  # issue "One source of truth": none over 500, aim ~400


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules that ``name`` imports (an import of a package counts as its __init__)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            # `from pkg import sub` imports the submodule pkg.sub; `from mod import name` imports mod
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, f"import cycles: {cycles}"


def test_the_cycle_finder_finds_a_planted_cycle():
    """A check that cannot fail is a defect: a planted a -> b -> c -> a is found, a tree is not."""
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


#: the packages from the bottom up: a module may import its own package and the packages below it, never one
#: above (imports inside functions count). docs/architecture.md draws the same picture.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("operators",),
    (
        "mutransfer._version",
        "mutransfer.errors",
        "mutransfer._atomic",
        "mutransfer._allocator",
        "mutransfer._local_ray",
    ),
    ("mutransfer.mup", "mutransfer.neuralop"),  # the muP facts' façade; neuraloperator's models as factories
    ("mutransfer._config",),
    ("mutransfer.data",),
    ("mutransfer._problems",),
    ("mutransfer._training",),
    ("mutransfer._study",),
    ("mutransfer._tracking",),
    ("mutransfer._study_folder",),
    ("mutransfer._diagnostics",),
    ("mutransfer._landscape",),
    ("mutransfer.serving",),
    ("mutransfer._reporting",),
    ("mutransfer._sweep",),
    ("mutransfer._api", "mutransfer.testing"),
    ("mutransfer.cli", "mutransfer.__main__", "mutransfer._browser"),
    # the package itself: its names are the Python API's (mutransfer/__init__.py); nothing below imports it
    ("mutransfer!",),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the package holding ``module`` (the longest matching prefix)."""
    best, depth = None, -1
    for number, packages in enumerate(LAYERS):
        for package in packages:
            if package.endswith("!"):  # this module alone, not the modules below it
                if module == package[:-1]:
                    return number
                continue
            if (module == package or module.startswith(package + ".")) and package.count(".") > depth:
                best, depth = number, package.count(".")
    if best is None:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS (and to docs/architecture.md)")
    return best


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs from a package up to a package above it."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )


def test_layers_point_down():
    """No package imports a package above it (docs/architecture.md, "The layers")."""
    bad = upward_edges(import_graph())
    assert not bad, "imports running up the layers:\n" + "\n".join(bad)


def test_the_layering_check_finds_a_planted_upward_import():
    """A check that cannot fail is a defect: data importing the sweep, or operators importing the service, is found."""
    graph = {
        "mutransfer.data._loading": {"mutransfer._sweep.context"},
        "operators.fno": {"mutransfer.errors"},
        "mutransfer._sweep.proxies": {"mutransfer.data._loading", "operators.fno"},
    }
    assert upward_edges(graph) == [
        "mutransfer.data._loading -> mutransfer._sweep.context",
        "operators.fno -> mutransfer.errors",
    ]


def test_every_package_has_a_layer():
    """A new package must be placed in LAYERS, so the layering covers it."""
    for name in _modules():
        layer_of(name)


#: mutransfer's public modules (issue "A library with a CLI on top", item 1): the Python API (the package itself,
#: mutransfer/__init__.py), the muP façade, the conformance kit, the errors, neuraloperator's factories, the data
#: API, the command line (its entry points) and MLflow's pyfunc loader (its path is written into every saved model).
#: Everything else is private: a "_" in its path (docs/architecture.md, "Public and private").
PUBLIC = (
    "mutransfer",
    "mutransfer.__main__",
    "mutransfer.errors",
    "mutransfer.mup",
    "mutransfer.neuralop",
    "mutransfer.testing",
    "mutransfer.data",
    "mutransfer.cli",
    "mutransfer.cli.main",
    "mutransfer.cli.launch",
    "mutransfer.serving",
    "mutransfer.serving.pyfunc",
)


def unlisted_public(modules: list[str]) -> list[str]:
    """The modules of ``modules`` with no private ("_") part that :data:`PUBLIC` does not list."""

    def listed(module: str) -> bool:
        return any(module == p or (p.endswith(".*") and (module + ".").startswith(p[:-1])) for p in PUBLIC)

    private = [m for m in modules if any(part.startswith("_") and part != "__main__" for part in m.split("."))]
    return sorted(m for m in modules if m.startswith("mutransfer") and m not in private and not listed(m))


def test_internals_are_private():
    """Every module of mutransfer outside its public surface has a private name."""
    assert unlisted_public(list(_modules())) == []


def test_the_privacy_check_finds_a_planted_public_module():
    """A check that cannot fail is a defect: a new top-level module, or a public one inside a private package
    that is named like a public one, is found; private ones and the listed surface are not."""
    planted = [
        "mutransfer.helpers",
        "mutransfer._sweep.runner",
        "mutransfer.cli.main",
        "mutransfer.mupx",
        "operators.fno",
    ]
    assert unlisted_public(planted) == ["mutransfer.helpers", "mutransfer.mupx"]


@pytest.mark.parametrize("name", sorted(_modules()))
def test_module_size(name):
    lines = len(_modules()[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (split it by job; see docs/architecture.md)"


def test_operator_kind_is_decided_by_the_registry():
    """At most a handful of comparisons of an operator's name against a literal outside operators/registry.py."""
    pattern = re.compile(r"""(==|!=|\bin)\s*\(?\s*["'](fno|galerkin|ono|gnot)["']""")
    hits = []
    for name, path in _modules().items():
        if name in ("operators.registry",):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#")[0]
            if pattern.search(code) and not any(word in code for word in ("attention_type", "nn_block", "preset")):
                hits.append(f"{name}:{number}: {line.strip()}")
    assert len(hits) <= 3, "\n".join(hits)


#: the operator families' names, as a branch on one would spell them
FAMILY_NAMES = ("fno", "galerkin", "ono", "gnot")
#: the most branches on an operator's kind allowed outside operators/ (issue 23: families own their behaviour)
MAX_FAMILY_BRANCHES = 5


def family_branches(source: str) -> list[int]:
    """Lines that branch on which family a model is: any ``is_fno``, ``.spectral`` in a condition, a name comparison.

    A condition is the test of an ``if``/``while``/``assert``/conditional expression, a
    comprehension's ``if`` or an operand of ``and``/``or``; a name comparison is ``==``,
    ``!=``, ``in`` with one of FAMILY_NAMES as a literal (alone or in a tuple/list/set).
    """
    tree = ast.parse(source)
    conditions = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.While, ast.Assert)):
            conditions.append(node.test)
        elif isinstance(node, ast.comprehension):
            conditions.extend(node.ifs)
        elif isinstance(node, ast.BoolOp):
            conditions.extend(node.values)
    lines = set()
    for condition in conditions:
        lines.update(n.lineno for n in ast.walk(condition) if isinstance(n, ast.Attribute) and n.attr == "spectral")

    def names(node) -> bool:
        items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return any(isinstance(i, ast.Constant) and i.value in FAMILY_NAMES for i in items)

    for node in ast.walk(tree):
        named_is_fno = (
            (isinstance(node, ast.Attribute) and node.attr == "is_fno")
            or (isinstance(node, ast.Name) and node.id == "is_fno")
            or (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("is_fno"))
        )
        if named_is_fno or (
            isinstance(node, ast.Compare) and any(names(side) for side in (node.left, *node.comparators))
        ):
            lines.add(node.lineno)
    return sorted(lines)


def test_operator_families_own_their_behaviour():
    """Outside operators/, at most MAX_FAMILY_BRANCHES lines ask which family a model is (is_fno, .spectral, names)."""
    hits = []
    for name, path in _modules().items():
        if name.split(".")[0] == "operators":
            continue
        source = path.read_text(encoding="utf-8")
        hits += [f"{name}:{n}: {source.splitlines()[n - 1].strip()}" for n in family_branches(source)]
    assert len(hits) <= MAX_FAMILY_BRANCHES, "\n".join(hits)


def test_the_family_branch_counter_finds_planted_branches():
    planted = """
def f(study, family, model, op):
    if study.is_fno:
        pass
    width = 1 if family.spectral else 2
    names = [f for f in families if f.spectral]
    if op == "gnot" or op in ("galerkin", "ono"):
        pass
    layers = model.spectral  # a model's attribute, not a branch
    return family.scales("K")
"""
    assert family_branches(planted) == [3, 5, 6, 7]
    assert family_branches("x = model.spectral\ny = {'fno': 1}\n") == []


# --------------------------------------------------------------------------- imports at the top

#: a function-level import is allowed only as `# noqa: PLC0415` (ruff, pyproject.toml) with its reason beside it
_DEFERRED = re.compile(r"noqa: PLC0415")


def unexplained_deferrals(text: str) -> list[int]:
    """Line numbers of ``# noqa: PLC0415`` imports with no "deferred" reason on the line or in the comment above."""
    lines = text.splitlines()
    bad = []
    for i, line in enumerate(lines):
        if not _DEFERRED.search(line) or "deferred" in line:
            continue
        above = i - 1
        while above >= 0 and lines[above].strip().startswith(("from ", "import ")) and "deferred" not in lines[above]:
            above -= 1  # a block of deferred imports shares the reason of its first line, or the comment above it
        if (
            above < 0
            or "deferred" not in lines[above]
            or not lines[above].strip().startswith(("#", "from ", "import "))
        ):
            bad.append(i + 1)
    return bad


def test_every_deferred_import_says_why():
    found = {
        str(path.relative_to(ROOT)): bad
        for path in sorted([*(ROOT / "mutransfer").rglob("*.py"), *(ROOT / "operators").rglob("*.py")])
        if (bad := unexplained_deferrals(path.read_text(encoding="utf-8")))
    }
    assert not found, f"function-level imports without a `deferred: <reason>` comment: {found}"


def test_the_deferral_check_finds_an_unexplained_one():
    explained = "def f():\n    # deferred: heavy\n    import ray  # noqa: PLC0415\n    import mlflow  # noqa: PLC0415\n"
    assert unexplained_deferrals(explained) == []
    assert (
        unexplained_deferrals(
            "def f():\n    import a  # noqa: PLC0415 -- deferred: heavy\n    import b  # noqa: PLC0415\n"
        )
        == []
    )
    assert unexplained_deferrals("def f():\n    x = 1\n    import ray  # noqa: PLC0415\n") == [3]


#: what only the operators' own family code (operators/) may say about the FNO: a class check, a construction, a
#: label. The service reads roles, families and the spectral-layer protocol instead (issue 34).
FNO_ONLY = (
    re.compile(r"isinstance\([^)]*\bSpectralConv\b"),
    re.compile(r"(?:^|[^\w.])FNO\("),
    re.compile(r"FNO-\{"),
)


def fno_only_lines(sources: dict[str, str]) -> list[str]:
    """``file:line`` of every line of ``sources`` (name -> text) that says what only the FNO's family code may."""
    return [
        f"{name}:{number}"
        for name, text in sources.items()
        for number, line in enumerate(text.splitlines(), 1)
        if any(pattern.search(line) for pattern in FNO_ONLY)
    ]


def test_the_service_names_no_operator_class():
    """No ``isinstance(…, SpectralConv)``, no ``FNO(`` construction, no ``FNO-{d}D`` label outside operators/: a
    user's operator goes through the same code (docs/byo.md)."""
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "mutransfer").rglob("*.py")}
    assert not fno_only_lines(sources)


def test_the_class_check_finds_planted_ones():
    """A check that cannot fail is a defect: each planted line is found, the protocol and a family lookup are not."""
    planted = {
        "a.py": "if isinstance(m, SpectralConv):\n    pass\n",
        "b.py": "model = FNO(dim, 1, 1, modes=k)\n",
        "c.py": 'label = f"FNO-{dim}D"\n',
        "d.py": 'layers = spectral_modules(model)\nfamily = get_family("fno")\nx = operators.fno.FNO\n',
    }
    assert fno_only_lines(planted) == ["a.py:1", "b.py:1", "c.py:1"]
