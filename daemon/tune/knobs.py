"""The knob values of a commit: the `.autoresearch-knobs.json` file in its tree, checked against the
manifest's `[[env.knobs]]`, and the `AUTORESEARCH_KNOB_<NAME>` variables a trial of it gets.

A tuned commit changes only this file, so the commit alone says what ran: the dispatcher reads the
file from the commit (never from a work tree) and exports its values. A knob the file does not name is
not exported: the code's own default holds (an idea may have changed it in code). The file is data
from a commit anyone may have pushed, so every key and value is validated before it reaches a trial;
an invalid file keeps the commit from running (the gate's note says why).
"""

from __future__ import annotations

import json
from typing import Any

from autoresearchd.manifest import EnvManifest

KNOBS_FILE = ".autoresearch-knobs.json"


class KnobFileError(ValueError):
    pass


def parse_values(data: bytes, manifest: EnvManifest) -> dict[str, Any]:
    """The values a knobs file sets, validated; raises KnobFileError saying what is wrong."""
    try:
        obj = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise KnobFileError(f"{KNOBS_FILE}: not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise KnobFileError(f"{KNOBS_FILE}: must hold a JSON object {{knob: value}}")
    out = {}
    for name, v in obj.items():
        k = manifest.knob(name)
        if k is None:
            known = ", ".join(k.name for k in manifest.knobs) or "none"
            raise KnobFileError(f"{KNOBS_FILE}: {name!r} is not a knob the manifest declares (declared: {known})")
        why = k.check(v)
        if why:
            raise KnobFileError(f"{KNOBS_FILE}: {why}")
        out[name] = v
    return out


def commit_values(repo, commit: str, manifest: EnvManifest) -> dict[str, Any]:
    """The knob values the commit's knobs file sets ({} without the file)."""
    data = repo.read_blob(f"{commit}:{KNOBS_FILE}")
    return {} if data is None else parse_values(data, manifest)


def file_error(repo, commit: str, manifest: EnvManifest) -> str | None:
    """Why the commit's knobs file may not run (None: absent or valid)."""
    try:
        commit_values(repo, commit, manifest)
    except KnobFileError as e:
        return str(e)
    return None


def knob_env(manifest: EnvManifest, values: dict[str, Any]) -> dict[str, str]:
    """The variables a trial gets for these values (exact text: a float reads back bit-identical)."""
    return {manifest.knob(n).env: manifest.knob(n).text(v) for n, v in values.items() if manifest.knob(n)}


def values_file(values: dict[str, Any]) -> bytes:
    """The file a tuned commit carries: sorted keys, one per line, so diffs show the knob that moved."""
    return (json.dumps(values, indent=1, sort_keys=True) + "\n").encode()


def full_values(manifest: EnvManifest, values: dict[str, Any]) -> dict[str, Any]:
    """Every knob's value: the file's, else the manifest's baseline value."""
    return {k.name: values.get(k.name, k.baseline) for k in manifest.knobs}
