"""The diff corpus (tests/data/diffs): its cases, their expected files and a repo of its base codebase.
Shared by tests/test_patching.py and bench/apply_rate.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from autoresearchd.implement.safety import SafetyRules
from autoresearchd.manifest import match_globs

DATA = Path(__file__).parent / "data" / "diffs"
SPEC = json.loads((DATA / "cases.json").read_text())
CASES: dict[str, dict] = SPEC["cases"]


def git(cwd, *args, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, input=input,
                          check=True, capture_output=True).stdout


def base_files() -> dict[str, bytes]:
    root = DATA / "base"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def expected_files(spec: dict) -> dict[str, bytes]:
    """Base files with the case's intended edits (exact, unique string replacements)."""
    files = {k: v.decode() for k, v in base_files().items()}
    for path, edits in spec.get("edits", {}).items():
        for old, new in edits:
            assert files[path].count(old) == 1, f"bad expectation: {old!r} not unique in {path}"
            files[path] = files[path].replace(old, new)
    for path in spec.get("delete", []):
        del files[path]
    files.update(spec.get("create", {}))
    return {k: v.encode() for k, v in files.items()}


def rules() -> SafetyRules:
    r = SPEC["rules"]
    return SafetyRules(is_frozen=lambda p: match_globs(p, r["frozen"]), max_file_bytes=r["max_file_bytes"],
                       max_diff_bytes=r["max_diff_bytes"])


def response(name: str) -> str:
    return (DATA / name).read_bytes().decode()


def make_base_repo(dest: Path) -> Path:
    """A git repo on `main` holding the base codebase, committed."""
    shutil.copytree(DATA / "base", dest)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "base")
    return dest


def work_files(root: Path) -> dict[str, bytes]:
    """Every file under root except .git, as the corpus expects them."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


# -- randomly mangled diffs: the property "never apply wrong" over many LLM-like slips ----------
MANGLES = ("noprefix", "counts", "bare", "numbers", "nospace", "twospace", "dropctx", "drift",
           "trailing", "fence")


def random_edit(rng, text: str) -> str:
    """1-3 random line edits (change, insert, delete) of a Python file."""
    import re
    lines = text.split("\n")[:-1]
    new = list(lines)
    for i in sorted(rng.sample(range(len(lines)), rng.randint(1, 3)), reverse=True):
        kind = rng.choice(["replace", "insert", "delete"])
        ind = re.match(r"\s*", lines[i]).group(0)
        if kind == "replace" and lines[i].strip():
            new[i] = lines[i] + "  # tuned"
        elif kind == "insert":
            new.insert(i + 1, ind + f"_v{rng.randint(0, 999)} = {rng.randint(0, 9)}")
        elif lines[i].strip():
            del new[i]
        else:
            new.insert(i, ind + "pass  # added")
    return "\n".join(new) + "\n"


def mangle(rng, diff: str) -> tuple[str, list[str]]:
    """The diff with 0-3 random slips of the kinds LLMs make."""
    import re
    muts = rng.sample(MANGLES, rng.randint(0, 3))
    res: list[str] = []
    line_no = 0
    for ln in diff.split("\n"):
        if ln.startswith(("--- ", "+++ ")):
            res.append(ln[:4] + ln[6:] if "noprefix" in muts else ln)
            continue
        if ln.startswith("@@"):
            m = re.match(r"@@ -(\d+)", ln)
            line_no = int(m.group(1))
            if "bare" in muts:
                ln = "@@ ... @@"
            elif "counts" in muts:
                ln = (f"@@ -{max(1, line_no + rng.randint(-30, 30))},{rng.randint(1, 12)} "
                      f"+{rng.randint(1, 99)},{rng.randint(1, 12)} @@")
            res.append(ln)
            continue
        if not ln:
            res.append(ln)
            continue
        tag, body = ln[0], ln[1:]
        if "twospace" in muts:
            ind = len(body) - len(body.lstrip(" "))
            body = " " * (ind // 2) + body.lstrip(" ")
        if tag == " " and "drift" in muts and body.strip() and rng.random() < 0.15:
            body += " # drift"
        if tag == " " and "trailing" in muts:
            body += "  "
        if "numbers" in muts and tag in " -":
            body = f"{line_no:>4}| " + body
        line_no += tag in " -"
        if tag == " " and "nospace" in muts and body.strip() and rng.random() < 0.4:
            res.append(body)
            continue
        res.append(tag + body)
    if "dropctx" in muts:
        for k in range(1, len(res)):
            if res[k].startswith(" ") and res[k - 1].startswith("@@"):
                del res[k]
                break
    text = "\n".join(res)
    if "fence" in muts:
        text = "Here is the change.\n\n```diff\n" + text.rstrip("\n") + "\n```\n\nThis should help.\n"
    return text, muts


def mangled_cases(seed: int, n: int):
    """n (response, path, expected new text, slips) from a seeded generator."""
    import difflib
    import random
    rng = random.Random(seed)
    base = {k: v.decode() for k, v in base_files().items()}
    out = []
    while len(out) < n:
        path = rng.choice(["train.py", "model.py", "data.py"])
        new = random_edit(rng, base[path])
        if new == base[path]:
            continue
        diff = "".join(difflib.unified_diff(base[path].splitlines(True), new.splitlines(True),
                                            "a/" + path, "b/" + path, n=rng.randint(1, 4)))
        text, muts = mangle(rng, diff)
        out.append((text, path, new, muts))
    return out
