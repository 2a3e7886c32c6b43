"""Readers for the files in deploy/ that the deploy tests share: the Dockerfile's instructions,
the Kubernetes manifests, pyproject's pins. Plain parsing, no container engine or cluster."""
from __future__ import annotations

import re
import shlex
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
    """Every Kubernetes document under deploy/kubernetes, by file name."""
    return {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
            for p in sorted(KUBERNETES.glob("*.yaml"))}


def one(kind: str, name: str | None = None) -> dict:
    found = [d for docs in manifests().values() for d in docs
             if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
