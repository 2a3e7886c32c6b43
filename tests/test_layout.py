"""The walls between the packages, measured with ``ast`` so they stay true.

Data flows one way: source -> decode -> ``state`` rules -> sinks (contract §1-§8's order). Each
package's README says what it may import; :data:`MAY_IMPORT` is the same table, and every
``fencewatch`` import in a package's modules (at the top or inside a function) must be allowed by
it. The CLI wiring (``streaming/cli.py``, ``streaming/commands/``) is the one place that may import
every stage. Also: no module over 600 lines and no function over 80 outside bench/ and tests/,
every package folder has a README that says what it may import, and pyproject lists every package.
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("state", "streaming", "sinks", "dashboards", "sim")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

#: package -> the fencewatch packages its modules may import (a package always imports itself and
#: its own subpackages). "*" = anything: the CLI wiring.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "state": (),
    "sinks": ("state",),
    "sinks.report": ("state", "sinks"),
    "dashboards": ("sinks.metrics", "state"),
    "sim": ("state",),
    "streaming.config": ("state",),
    "streaming.ingest": ("state", "streaming.config"),
    "streaming.sources": ("streaming.config", "state.records"),
    "streaming.runtime": ("state", "sinks", "streaming.config", "streaming.ingest", "streaming.sources"),
    "streaming.brokers": (),
    "streaming.commands": ("*",),
    "streaming.cli": ("*",),
    "streaming": (),  # the package face
}

#: Imports that run against the flow today, each to be removed (issue 37). A row that no longer
#: occurs fails the test too, so this list can only shrink.
KNOWN_AGAINST_THE_FLOW: set[tuple[str, str]] = set()

#: Modules over the limits today, each to be split (issue 37); this list can only shrink too.
KNOWN_LONG: set[str] = set()


def modules() -> list[Path]:
    return sorted(p for top in TOPS for p in (ROOT / top).rglob("*.py"))


def package_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    # the longest MAY_IMPORT key that is a prefix of the module's dotted name
    dotted = ".".join(parts)
    keys = sorted((k for k in MAY_IMPORT if dotted == k or dotted.startswith(k + ".")), key=len, reverse=True)
    if not keys:
        raise AssertionError(f"{rel}: no row in MAY_IMPORT for its package")
    return keys[0]


def fencewatch_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fencewatch."):
            base = node.module.removeprefix("fencewatch.")
            names = [f"{base}.{a.name}" for a in node.names]
            modules_named = [n for n in names if _is_module_or_package(n)]  # `from fencewatch.sinks import metrics`
            found.update(modules_named or [base])
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("fencewatch.") for a in node.names if a.name.startswith("fencewatch."))
    return found


def allowed(package: str, target: str) -> bool:
    rules = MAY_IMPORT[package]
    if "*" in rules:
        return True
    return any(target == p or target.startswith(p + ".") for p in (package, *rules))


def _is_module_or_package(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def against_the_flow() -> set[tuple[str, str]]:
    out = set()
    for path in modules():
        package = package_of(path)
        for target in fencewatch_imports(path):
            if _is_module_or_package(target) and not allowed(package, target):
                out.add((str(path.relative_to(ROOT)), target))
    return out


def test_data_flows_one_way():
    found = against_the_flow()
    new = sorted(found - KNOWN_AGAINST_THE_FLOW)
    gone = sorted(KNOWN_AGAINST_THE_FLOW - found)
    assert not new, "imports against the flow (see MAY_IMPORT and the packages' READMEs):\n" + "\n".join(
        f"  {f} imports fencewatch.{t}" for f, t in new)
    assert not gone, f"remove from KNOWN_AGAINST_THE_FLOW, they are gone: {gone}"


def test_the_wall_catches_an_import_against_the_flow(tmp_path):
    assert not allowed("state", "streaming.runtime.query")
    assert not allowed("sim", "streaming.config")
    assert not allowed("streaming.ingest", "streaming.runtime.routing")
    assert allowed("streaming.runtime", "state.group") and allowed("streaming.commands", "sim.world")
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from fencewatch.sinks import metrics\n    import fencewatch.state.model\n")
    assert fencewatch_imports(src) >= {"sinks.metrics", "state.model"}


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_short(path):
    lines = len(path.read_text().splitlines())
    if str(path.relative_to(ROOT)) in KNOWN_LONG:
        assert lines > MAX_MODULE_LINES or _long_functions(path), "it is short now: remove it from KNOWN_LONG"
        pytest.skip("known to be too long (issue 37)")
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)}: {lines} lines (at most {MAX_MODULE_LINES})"
    long = _long_functions(path)
    assert not long, f"{path.relative_to(ROOT)}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def packages() -> list[Path]:
    return sorted({p.parent for top in TOPS for p in (ROOT / top).rglob("__init__.py")})


@pytest.mark.parametrize("folder", packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_says_what_it_may_import(folder):
    readme = folder / "README.md"
    assert readme.exists(), f"{folder.relative_to(ROOT)} has no README.md"
    assert re.search(r"may import", readme.read_text(), re.I), f"{readme.relative_to(ROOT)} does not say what it may import"


def test_pyproject_lists_every_package():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    present = {"fencewatch." + ".".join(p.relative_to(ROOT).parts) for p in packages()}
    assert listed == present, f"missing: {sorted(present - listed)}; not packages: {sorted(listed - present)}"
