"""The knobs of a commit and their values: the knobs an idea's code declares in its
`.autoresearch-knobs.toml` (on top of the manifest's `[[env.knobs]]`), the `.autoresearch-knobs.json`
file of values checked against both, and the `AUTORESEARCH_KNOB_<NAME>` variables a trial of it gets.

An idea that introduces a knob declares it in its own tree, in the `[[knobs]]` tables of
`.autoresearch-knobs.toml` (the keys of `[[env.knobs]]`; docs/environment.md, "Knobs an idea
declares"), whether the LLM wrote it or a person pushed it. A tuned commit keeps its idea's tree, so the
declaration travels with it: every reader asks `commit_manifest` for the knobs of the commit at hand.
A declaration is untrusted data like the values file: its size, its count, every name, type and range is
validated, a name the manifest already declares is refused, and an invalid one keeps the commit from
running with the reason in its note (the gate), never a crash.

A tuned commit changes only this file, so the commit alone says what ran: the dispatcher reads the
file from the commit (never from a work tree) and exports its values. A knob the file does not name is
not exported: the code's own default holds (an idea may have changed it in code). The file is data
from a commit anyone may have pushed, so every key and value is validated before it reaches a trial;
an invalid file keeps the commit from running (the gate's note says why).
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

from pydantic import ValidationError

from autoresearchd import defaults
from autoresearchd.manifest import EnvManifest, Knob

KNOBS_FILE = ".autoresearch-knobs.json"
DECLARE_FILE = ".autoresearch-knobs.toml"       # the knobs an idea's code introduces


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
            raise KnobFileError(f"{KNOBS_FILE}: {name!r} is not a knob the manifest declares, nor the idea's "
                                f"{DECLARE_FILE} (declared: {known})")
        why = k.check(v)
        if why:
            raise KnobFileError(f"{KNOBS_FILE}: {why}")
        out[name] = v
    return out


def parse_declaration(data: bytes, manifest: EnvManifest) -> list[Knob]:
    """The knobs a `.autoresearch-knobs.toml` declares, validated like `[[env.knobs]]`; raises
    KnobFileError saying what is wrong (the first fault)."""
    if len(data) > defaults.IDEA_KNOBS_FILE_BYTES:
        raise KnobFileError(f"{DECLARE_FILE}: {len(data)} bytes, more than the {defaults.IDEA_KNOBS_FILE_BYTES} "
                            "a knob declaration may hold")
    try:
        obj = tomllib.loads(data.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise KnobFileError(f"{DECLARE_FILE}: not valid TOML ({e})") from None
    if set(obj) - {"knobs"} or not isinstance(obj.get("knobs", []), list):
        raise KnobFileError(f"{DECLARE_FILE}: holds only [[knobs]] tables (found: {', '.join(sorted(obj))})")
    tables = obj.get("knobs", [])
    if len(tables) > defaults.IDEA_KNOBS_MAX:
        raise KnobFileError(f"{DECLARE_FILE}: {len(tables)} knobs, more than the {defaults.IDEA_KNOBS_MAX} an idea "
                            "may declare")
    out: list[Knob] = []
    for i, t in enumerate(tables):
        try:
            k = Knob.model_validate(t)
        except ValidationError as e:
            why = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'knob'}: {err['msg']}" for err in e.errors())
            raise KnobFileError(f"{DECLARE_FILE}: knob #{i + 1}: {why}") from None
        if manifest.knob(k.name) is not None:
            raise KnobFileError(f"{DECLARE_FILE}: knob {k.name!r} is the manifest's own: an idea declares only "
                                "new knobs (its value goes in a knobs file, its range stays the manifest's)")
        if any(o.name == k.name for o in out):
            raise KnobFileError(f"{DECLARE_FILE}: knob {k.name!r} is declared twice")
        out.append(k)
    return out


def commit_manifest(repo, commit: str, manifest: EnvManifest) -> EnvManifest:
    """The manifest with the knobs the commit's tree declares added (the manifest itself without a
    declaration); raises KnobFileError for an invalid declaration."""
    data = repo.read_blob(f"{commit}:{DECLARE_FILE}")
    if data is None:
        return manifest
    declared = parse_declaration(data, manifest)
    return manifest.model_copy(update={"knobs": [*manifest.knobs, *declared]}) if declared else manifest


def declared_knobs(repo, commit: str, manifest: EnvManifest) -> list[Knob]:
    """The knobs the commit's own declaration adds ([] without one, or with an invalid one)."""
    try:
        return commit_manifest(repo, commit, manifest).knobs[len(manifest.knobs):]
    except KnobFileError:
        return []


def commit_values(repo, commit: str, manifest: EnvManifest, cm: EnvManifest | None = None) -> dict[str, Any]:
    """The knob values the commit's knobs file sets ({} without the file), checked against the
    manifest's knobs and the ones the commit declares (`cm`: its commit_manifest, when the caller has it)."""
    data = repo.read_blob(f"{commit}:{KNOBS_FILE}")
    if data is None:
        return {}
    return parse_values(data, cm if cm is not None else commit_manifest(repo, commit, manifest))


def commit_env(repo, commit: str, manifest: EnvManifest) -> dict[str, str]:
    """The AUTORESEARCH_KNOB_* variables a trial of the commit gets (the gate validated both files)."""
    cm = commit_manifest(repo, commit, manifest)        # once: the declaration is a blob read and a parse
    return knob_env(cm, commit_values(repo, commit, manifest, cm))


def file_error(repo, commit: str, manifest: EnvManifest) -> str | None:
    """Why the commit's knob declaration or knobs file may not run (None: absent or valid)."""
    try:
        commit_values(repo, commit, manifest, commit_manifest(repo, commit, manifest))
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
