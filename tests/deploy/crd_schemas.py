"""The custom resources deploy/ ships, validated against their operators' own CRD schemas.

``tests/deploy/crds/*.json`` hold the ``openAPIV3Schema`` of each CRD version we write, taken
from the operator's released CRD file with its ``description`` texts removed (the rest is
unchanged); ``crds/README.md`` says where each comes from. :func:`validator` turns such a
structural schema into a JSON Schema the way the API server reads it, strictly (an unknown field
is an error, as ``kubectl apply`` with its default strict field validation reports it):

- ``additionalProperties: false`` on every object that lists its ``properties``, unless it has
  ``x-kubernetes-preserve-unknown-fields`` (or an ``additionalProperties`` of its own);
- ``x-kubernetes-int-or-string`` -> integer or string; ``nullable`` -> null allowed too;
- a pattern in Go's syntax that Python's ``re`` reads otherwise: ``^(?i)...`` (a flag after the
  anchor) becomes ``(?i)^...``;
- CEL rules (``x-kubernetes-validations``) are not evaluated: the API server's job.

Regenerate a file from an upstream CRD (an operator upgrade)::

    python tests/deploy/crd_schemas.py CRD.yaml VERSION > tests/deploy/crds/<plural>.<group>.json
"""
from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema

CRDS = Path(__file__).with_name("crds")


def extract(crd: dict, version: str) -> dict:
    """The stored form: group, kind, version and the schema without descriptions."""
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": version,
            "openAPIV3Schema": _without_descriptions(served["schema"]["openAPIV3Schema"])}


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        # A description's text is documentation; a property called "description" (a schema,
        # not a string) stays.
        return {k: _without_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def to_json_schema(node: Any) -> Any:
    """A structural schema as a strict JSON Schema (see the module docstring)."""
    if isinstance(node, list):
        return [to_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items()
           if not k.startswith("x-kubernetes-") and k not in ("nullable", "format")}
    if node.get("properties") is not None:
        out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node \
            and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if isinstance(node.get("pattern"), str):
        out["pattern"] = _python_pattern(node["pattern"])
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _python_pattern(pattern: str) -> str:
    """Go's RE2 accepts inline flags anywhere; Python only at the start of the expression."""
    m = re.match(r"\^\(\?([a-zA-Z]+)\)", pattern)
    return f"(?{m.group(1)})^{pattern[m.end():]}" if m else pattern


@functools.cache
def stored() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> stored schema file, for every file under crds/."""
    out = {}
    for path in sorted(CRDS.glob("*.json")):
        doc = json.loads(path.read_text())
        out[(f"{doc['group']}/{doc['version']}", doc["kind"])] = doc
    return out


@functools.cache
def validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    doc = stored().get((api_version, kind))
    if doc is None:
        raise LookupError(f"no stored CRD schema for {kind} {api_version}; have {sorted(stored())}")
    schema = to_json_schema(doc["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def problems(obj: dict) -> list[str]:
    """Every place ``obj`` breaks its kind's CRD schema ('' when valid)."""
    found = validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in found)


if __name__ == "__main__":
    import yaml

    crd_file, crd_version = sys.argv[1], sys.argv[2]
    with open(crd_file, encoding="utf-8") as f:
        crd_doc = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "CustomResourceDefinition")
    json.dump(extract(crd_doc, crd_version), sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
