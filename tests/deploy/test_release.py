"""Release hygiene: the licence the package declares is the one shipped, the changelog keeps
Keep a Changelog's shape and flags checkpoint changes with what to do, and every file
docs/releasing.md lists carries the version pyproject.toml defines."""
from __future__ import annotations

import re

import pytest
import yaml
from packaging.version import Version

from deploy_files import DEPLOY, ROOT, dockerfile_instructions, pyproject

CHANGELOG = ROOT / "CHANGELOG.md"
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}  # Keep a Changelog 1.1.0


def test_the_licence_file_is_the_apache_2_text_pyproject_and_the_image_declare():
    text = (ROOT / "LICENSE").read_text()
    assert re.search(r"^\s*Apache License\s*\n\s*Version 2\.0, January 2004", text)
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10_000, "the full text"
    assert pyproject()["project"]["license"] == "Apache-2.0"
    label = next(i.args for i in dockerfile_instructions() if i.keyword == "LABEL")
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in label


def _releases(text: str) -> list[tuple[str, str]]:
    """(heading, body) of each `## ` section."""
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return [(p.split("\n", 1)[0], p.split("\n", 1)[1] if "\n" in p else "") for p in parts]


def changelog_problems(text: str) -> list[str]:
    problems = []
    if not text.startswith("# Changelog\n"):
        problems.append("the first line is '# Changelog'")
    releases = _releases(text)
    if not releases or releases[0][0] != "[Unreleased]":
        problems.append("the first section is [Unreleased]")
    versions = []
    for heading, body in releases[1:]:
        m = re.fullmatch(r"\[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d( \[YANKED\])?", heading)
        if not m:
            problems.append(f"release heading {heading!r}: '[X.Y.Z] - YYYY-MM-DD'")
            continue
        versions.append(Version(m.group(1)))
    if versions != sorted(versions, reverse=True) or len(set(versions)) != len(versions):
        problems.append(f"releases newest first, each once: {versions}")
    for heading, body in releases:
        for section in re.findall(r"^### (.+)$", body, re.M):
            if section not in SECTIONS:
                problems.append(f"{heading}: section {section!r} is not one of {sorted(SECTIONS)}")
        for entry in re.findall(r"^- (.*(?:\n  .*)*)", body, re.M):
            entry = " ".join(entry.split())
            if "**[checkpoint]**" in entry and "What to do" not in entry:
                problems.append(f"{heading}: a [checkpoint] entry without 'What to do': {entry[:60]!r}")
    return problems


def test_the_changelog_keeps_its_shape():
    assert changelog_problems(CHANGELOG.read_text()) == []


@pytest.mark.parametrize("broken, problem", [
    ("# Changelog\n\n## [0.2.0] - 2027-01-01\n", "the first section is [Unreleased]"),
    ("# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2027-01-01\n\n## [0.2.0] - 2027-02-01\n", "newest first"),
    ("# Changelog\n\n## [Unreleased]\n\n### Improved\n\n- x\n", "section 'Improved'"),
    ("# Changelog\n\n## [Unreleased]\n\n### Changed\n\n- **[checkpoint]** the state key changed.\n", "without 'What to do'"),
    ("# Changelog\n\n## [Unreleased]\n\n## 0.2.0 (2027-01-01)\n", "release heading"),
])
def test_the_changelog_check_would_catch(broken, problem):
    assert any(problem in p for p in changelog_problems(broken)), changelog_problems(broken)


def test_every_file_releasing_md_lists_carries_the_version():
    version = pyproject()["project"]["version"]
    text = (ROOT / "docs" / "releasing.md").read_text()
    section = text[text.index("## The files that carry the version"):]
    section = section[:section.index("\n## ", 1)]
    listed = re.findall(r"^- `([^`]+)`", section, re.M)
    assert "pyproject.toml" in listed and len(listed) >= 5
    for name in listed[1:]:
        assert version in (ROOT / name).read_text(), f"{name} does not carry {version}"
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    tags = {s["image"].rsplit(":", 1)[1] for s in compose["services"].values() if s.get("image", "").startswith("fencewatch:")}
    assert tags == {version}
    kust = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    assert [i["newTag"] for i in kust["images"] if i["name"] == "fencewatch"] == [version]
    stale = [n for n in ("deploy/Dockerfile", "docs/deploy.md")
             if set(re.findall(r"fencewatch:(\d+\.\d+\.\d+)", (ROOT / n).read_text())) - {version}]
    assert not stale, f"an older version is still named in {stale}"
