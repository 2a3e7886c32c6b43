"""Readers for the files in deploy/ that the deploy tests share: the Dockerfile's instructions,
the Kubernetes manifests as kustomize renders them, pyproject's pins. No container engine or
cluster."""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
KUBERNETES = DEPLOY / "kubernetes"


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str     # the rest of the logical line, continuations joined
    stage: int    # index of the FROM it belongs to (-1: before the first FROM)


def dockerfile_instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """Logical instructions: comments dropped, backslash continuations joined."""
    out: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(keyword, args.strip(), stage))
    return out


def dockerfile_args(instructions: list[Instruction]) -> dict[str, str]:
    """ARG defaults (the last one wins, as for a build without --build-arg)."""
    out = {}
    for ins in instructions:
        if ins.keyword == "ARG" and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            out[name.strip()] = value.strip().strip('"')
    return out


def expand(text: str, args: dict[str, str]) -> str:
    """``${NAME}`` and ``$NAME`` replaced by build-arg defaults (as the builder does)."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)


def run_commands(instructions: list[Instruction], stage: int) -> list[list[str]]:
    """The shell commands of a stage's RUN steps, each split at ``&&`` into argv lists."""
    out = []
    for ins in instructions:
        if ins.keyword == "RUN" and ins.stage == stage:
            for part in ins.args.split("&&"):
                out.append(shlex.split(part))
    return out


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def manifests() -> dict[str, list[dict]]:
    """Every Kubernetes document in the files under deploy/kubernetes (not its folders), by file name."""
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
            for p in sorted(KUBERNETES.glob("*.yaml"))}


def kustomize() -> str:
    """The kustomize binary: $KUSTOMIZE, the one `make kustomize` builds, or one on the PATH."""
    makefile = (ROOT / "Makefile").read_text()
    version = re.search(r"^KUSTOMIZE_VERSION \?= (\S+)", makefile, re.M).group(1)
    cache = Path(os.environ.get("TOOLS", Path.home() / ".cache" / "fencewatch-tools"))
    for candidate in (os.environ.get("KUSTOMIZE"), cache / f"kustomize-{version}" / "kustomize", shutil.which("kustomize")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise AssertionError(f"kustomize {version} not found: `make kustomize` builds it into {cache}")


def build(folder: Path) -> list[dict]:
    """``kustomize build folder``: the objects `kubectl apply -k` would send."""
    done = subprocess.run([kustomize(), "build", str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@functools.cache
def _rendered() -> tuple[str, ...]:
    return tuple(yaml.safe_dump(d) for d in build(KUBERNETES))


def rendered() -> list[dict]:
    """deploy/kubernetes as kustomize renders it (a fresh copy each call)."""
    return [yaml.safe_load(text) for text in _rendered()]


def one(kind: str, name: str | None = None, docs: list[dict] | None = None) -> dict:
    """The one rendered object of this kind (and name; a generated ConfigMap's name has kustomize's
    hash suffix, so a name also matches ``name-<hash>``)."""
    found = [d for d in (rendered() if docs is None else docs)
             if d.get("kind") == kind and (name is None or re.fullmatch(rf"{re.escape(name)}(-[a-z0-9]{{10}})?",
                                                                         d["metadata"]["name"]))]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
