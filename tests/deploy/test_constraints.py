"""deploy/constraints.txt: the image installs every dependency at one tested version.

The Dockerfile's runtime ``pip install`` reads it (``-c``); it pins exactly (``==``) every
package of the wheel's dependency tree (fencewatch plus the image's ``registry`` extra), each
pin inside pyproject.toml's specifiers. The tree is walked from the installed packages'
metadata (this virtualenv: the versions the tests run on), markers evaluated for this Python.
"""
from __future__ import annotations

import importlib.metadata as md
import shlex

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from deploy_files import DEPLOY, dockerfile_instructions, pyproject, run_commands

CONSTRAINTS = DEPLOY / "constraints.txt"
IMAGE_EXTRAS = ["registry"]


def pins() -> dict[str, Version]:
    out = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==" and not req.extras and not req.marker, f"{line}: pin one exact version"
            name = canonicalize_name(req.name)
            assert name not in out, f"{req.name} pinned twice"
            out[name] = Version(spec.version)
    return out


def direct_requirements() -> list[Requirement]:
    project = pyproject()["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in IMAGE_EXTRAS:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def installed_tree(root: str, extras: list[str]) -> set[str]:
    """Names of every distribution ``pip install root[extras]`` pulls in, from installed metadata."""
    seen: dict[str, set[str]] = {}
    todo = [(root, set(extras))]
    while todo:
        name, wanted = todo.pop()
        dist = md.distribution(name)
        key = canonicalize_name(dist.metadata["Name"])
        if key in seen and wanted <= seen[key]:
            continue
        seen.setdefault(key, set()).update(wanted)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
                continue
            todo.append((req.name, set(req.extras)))
    return set(seen) - {canonicalize_name(root)}


def test_every_pyproject_dependency_is_pinned_inside_its_specifier():
    pinned = pins()
    for req in direct_requirements():
        name = canonicalize_name(req.name)
        assert name in pinned, f"{req.name} is not in deploy/constraints.txt"
        assert pinned[name] in req.specifier, f"{req.name}=={pinned[name]} breaks pyproject's {req.specifier}"


def test_the_whole_dependency_tree_is_pinned():
    missing = installed_tree("fencewatch", IMAGE_EXTRAS) - set(pins())
    assert not missing, f"not pinned in deploy/constraints.txt: {sorted(missing)}"


def test_the_pins_are_the_versions_the_tests_run_on():
    pinned = pins()
    drift = {n: (str(v), md.version(n)) for n, v in pinned.items() if Version(md.version(n)) != v}
    assert not drift, f"constraints.txt differs from this virtualenv (pinned, installed): {drift}"


def test_the_checker_would_catch_a_pin_outside_pyproject(tmp_path, monkeypatch):
    """Negative control: a pin breaking a specifier fails the first test."""
    bad = CONSTRAINTS.read_text().replace("\npandas==", "\npandas==3.0.0\n# was pandas==")
    path = tmp_path / "constraints.txt"
    path.write_text(bad)
    monkeypatch.setattr(__import__(__name__), "CONSTRAINTS", path)
    with pytest.raises(AssertionError, match="pandas==3.0.0 breaks"):
        test_every_pyproject_dependency_is_pinned_inside_its_specifier()


def test_the_image_installs_with_the_constraints():
    instructions = dockerfile_instructions()
    runtime = max(i.stage for i in instructions)
    copies = [shlex.split(i.args) for i in instructions if i.keyword == "COPY" and i.stage == runtime
              and "--from" not in i.args]
    (dest,) = [words[-1] for words in copies if words[:-1] == ["deploy/constraints.txt"]]
    installs = [c for c in run_commands(instructions, runtime) if c[:2] == ["pip", "install"]]
    assert installs and all("-c" in c and c[c.index("-c") + 1] == dest for c in installs), \
        "every pip install in the image reads the constraints"
