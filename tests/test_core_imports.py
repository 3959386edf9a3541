"""The pure packages import only an allow-list: NumPy, pure standard-library modules and themselves.

The import-linter contracts in ``pyproject.toml`` forbid named modules; this test turns the rule
around (anything not listed fails), so a new dependency of the core is a decision, not an accident.
It also rejects NumPy's hidden global state and file functions, which an import check cannot see:
randomness comes in as a ``numpy.random.Generator`` and files are the shells' business.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: Packages held to the allow-list; each may import itself, NumPy and PURE_STDLIB, nothing else
#: (so the core and the deployability verifier do not import each other either).
PURE_PACKAGES = ("kalena.core", "kalena.deployability")

#: Standard-library modules with no I/O, clock, randomness, threads or process state. Discipline
#: still applies to two of them: the ``decimal`` context is per-thread mutable state (use the
#: default context, never change it) and ``functools.cache`` on a module-level function is hidden
#: module state. ``json`` only turns strings into data and back (``json.load`` reads a file the
#: caller opened). Out on purpose: pathlib, io, os, sys, time, datetime, uuid, logging, random,
#: warnings, multiprocessing, threading, subprocess, socket, asyncio, importlib.
PURE_STDLIB = frozenset(
    {
        "__future__",
        "abc",
        "bisect",
        "collections",
        "copy",
        "dataclasses",
        "decimal",
        "enum",
        "fractions",
        "functools",
        "heapq",
        "itertools",
        "json",
        "math",
        "numbers",
        "operator",
        "re",
        "string",
        "types",
        "typing",
    }
)

#: NumPy functions that read or write files (``ndarray.tofile`` is caught by its attribute name).
NUMPY_FILE_FUNCTIONS = frozenset(
    {"load", "save", "savez", "savez_compressed", "loadtxt", "savetxt", "genfromtxt", "fromfile", "fromregex",
     "memmap", "DataSource"}
)  # fmt: skip
#: Builtins that do I/O or import behind the import statement's back.
FORBIDDEN_BUILTINS = frozenset({"open", "input", "print", "__import__"})


def _dotted(node: ast.expr) -> str | None:
    """``np.random.default_rng`` for a chain of names and attributes, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    if level == 0:
        return name or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _numpy_problem(name: str) -> str | None:
    """Why the NumPy name ``numpy.X.Y`` may not be used in a pure package, or None."""
    parts = name.split(".")
    if parts[:2] == ["numpy", "random"] and parts[2:3] != ["Generator"]:
        return f"{name}: NumPy's global or seeded random state (take a numpy.random.Generator)"
    if len(parts) >= 2 and parts[1] in NUMPY_FILE_FUNCTIONS:
        return f"{name}: NumPy file I/O"
    return None


def check_source(source: str, module: str, package: str, *, is_package: bool = False) -> list[str]:
    """Every offence in one module's source, as ``LINE: what``.

    ``module`` is the module's dotted name, ``package`` the pure package it belongs to (its only
    allowed ``kalena`` imports); ``is_package`` is true for an ``__init__.py``.
    """
    tree = ast.parse(source)
    numpy_names: dict[str, str] = {}  # local name -> the NumPy name it is bound to
    out: list[str] = []

    def allowed(name: str) -> bool:
        top = name.split(".")[0]
        return top in PURE_STDLIB or top == "numpy" or name == package or name.startswith(package + ".")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not allowed(alias.name):
                    out.append(f"{node.lineno}: import of {alias.name}")
                elif alias.name.split(".")[0] == "numpy":
                    if (why := _numpy_problem(alias.name)) is not None:
                        out.append(f"{node.lineno}: {why}")
                    local = alias.asname or alias.name.split(".")[0]
                    numpy_names[local] = alias.name if alias.asname else "numpy"
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                # `from kalena import core` names a module: check the module, not its parent
                full = f"{base}.{alias.name}" if package.startswith(base + ".") else base
                if not allowed(full):
                    out.append(f"{node.lineno}: import of {full}")
                elif base.split(".")[0] == "numpy":
                    if (why := _numpy_problem(f"{base}.{alias.name}")) is not None:
                        out.append(f"{node.lineno}: {why}")
                    numpy_names[alias.asname or alias.name] = f"{base}.{alias.name}"

    class Uses(ast.NodeVisitor):
        def visit_Attribute(self, node: ast.Attribute) -> None:
            if node.attr == "tofile":
                out.append(f"{node.lineno}: .tofile: NumPy file I/O")
            name = _dotted(node)
            if name is None:
                self.generic_visit(node)
                return
            root, _, rest = name.partition(".")
            if root in numpy_names:  # the whole chain at once: np.random.Generator is fine
                why = _numpy_problem(f"{numpy_names[root]}.{rest}")
                if why is not None:
                    out.append(f"{node.lineno}: {why}")

        def visit_Name(self, node: ast.Name) -> None:
            if node.id in numpy_names and (why := _numpy_problem(numpy_names[node.id])) is not None:
                out.append(f"{node.lineno}: {why}")

        def visit_Call(self, node: ast.Call) -> None:
            if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_BUILTINS:
                out.append(f"{node.lineno}: {node.func.id}(): I/O or a hidden import")
            self.generic_visit(node)

    Uses().visit(tree)
    return sorted(set(out), key=lambda s: (int(s.split(":")[0]), s))


def _modules(package: str) -> list[tuple[Path, str, bool]]:
    root = SRC.joinpath(*package.split("."))
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        is_package = rel.name == "__init__"
        parts = rel.parts[:-1] if is_package else rel.parts
        out.append((path, ".".join(parts), is_package))
    return out


@pytest.mark.parametrize("package", PURE_PACKAGES)
def test_pure_packages_import_only_the_allow_list(package: str) -> None:
    modules = _modules(package)
    assert modules, f"no modules found for {package}"
    offences = [
        f"{path.relative_to(SRC.parent)}:{line}"
        for path, module, is_package in modules
        for line in check_source(path.read_text(), module, package, is_package=is_package)
    ]
    assert not offences, "\n".join(offences)


CORE = ("kalena.core.placement.config", "kalena.core")
REJECTED = [
    ("os", "import os\n", ["1: import of os"]),
    ("os-path", "from os import path\n", ["1: import of os"]),
    ("pathlib", "import pathlib\n", ["1: import of pathlib"]),
    ("time-in-function", "def f():\n    import time\n", ["2: import of time"]),
    ("a-shell", "from kalena.sim import engine\n", ["1: import of kalena.sim"]),
    ("a-shell-relative", "from ...sim import engine\n", ["1: import of kalena.sim"]),
    ("a-shell-by-name", "from kalena import ir\n", ["1: import of kalena.ir"]),
    ("the-verifier", "import kalena.deployability\n", ["1: import of kalena.deployability"]),
    ("seeded-rng", "import numpy as np\nrng = np.random.default_rng(0)\n",
     ["2: numpy.random.default_rng: NumPy's global or seeded random state (take a numpy.random.Generator)"]),
    ("global-seed", "import numpy\nnumpy.random.seed(1)\n",
     ["2: numpy.random.seed: NumPy's global or seeded random state (take a numpy.random.Generator)"]),
    ("from-random", "from numpy.random import default_rng\n",
     ["1: numpy.random.default_rng: NumPy's global or seeded random state (take a numpy.random.Generator)"]),
    ("random-module", "from numpy import random as r\nr.rand()\n",
     ["1: numpy.random: NumPy's global or seeded random state (take a numpy.random.Generator)",
      "2: numpy.random.rand: NumPy's global or seeded random state (take a numpy.random.Generator)"]),
    ("np-load", "import numpy as np\nnp.load('x.npy')\n", ["2: numpy.load: NumPy file I/O"]),
    ("np-savetxt", "import numpy as np\nnp.savetxt('x', a)\n", ["2: numpy.savetxt: NumPy file I/O"]),
    ("memmap", "import numpy as np\nm = np.memmap\n", ["2: numpy.memmap: NumPy file I/O"]),
    ("tofile", "def f(a):\n    a.tofile('x')\n", ["2: .tofile: NumPy file I/O"]),
    ("open", "def f():\n    return open('x')\n", ["2: open(): I/O or a hidden import"]),
    ("dunder-import", "m = __import__('os')\n", ["1: __import__(): I/O or a hidden import"]),
]  # fmt: skip


@pytest.mark.parametrize(("source", "want"), [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_the_checker_rejects(source: str, want: list[str]) -> None:
    assert check_source(source, *CORE) == want


ACCEPTED = [
    ("numpy", "import numpy as np\nfrom numpy.typing import ArrayLike\n"),
    ("generator-hint", "import numpy as np\ndef f(rng: np.random.Generator) -> None:\n    rng.random()\n"),
    ("generator-import", "from numpy.random import Generator\n"),
    ("itself", "from kalena.core.resources import DIMS\nimport kalena.core.model\nfrom kalena import core\n"),
    ("itself-relative", "from ..resources import DIMS\nfrom . import score\n"),
    ("future", "from __future__ import annotations\n"),
    ("pure-stdlib", "from collections.abc import Mapping\nimport math, re, json, functools\n"),
]  # fmt: skip


@pytest.mark.parametrize("source", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_the_checker_accepts(source: str) -> None:
    assert check_source(source, *CORE) == []


def test_an_init_module_resolves_relative_imports_from_itself() -> None:
    src = "from .config import PlacementConfig\nfrom .. import sim\n"
    assert check_source(src, "kalena.core.placement", "kalena.core", is_package=True) == []
    assert check_source("from ... import sim\n", "kalena.core.placement", "kalena.core", is_package=True) == [
        "1: import of kalena.sim"
    ]
