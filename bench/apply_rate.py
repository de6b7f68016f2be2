"""How many realistic, malformed LLM diffs apply without another LLM round trip, and how many apply WRONG.

Runs the corpus in tests/data/diffs through three appliers, each given the same text (the diff that
`extract_diff` found in the model's answer, so the baselines are not penalised for prose and fences):
  ours       autoresearchd.patching.apply_diff (git apply, repaired diff, fuzzy locator, safety gates)
  git apply  plain `git apply` in a fresh checkout of the base codebase
  patch -p1  GNU patch (default fuzz 2) in a fresh checkout
"recovered" = the result equals the expected files exactly; "wrong" = it applied but the files differ.
Cases that must NOT apply (unsafe, ambiguous, truncated, broken) are counted separately: applying one
of them is a wrong apply too.

    .venv/bin/python bench/apply_rate.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fixtures_patching import (CASES, expected_files, make_base_repo, response, rules,  # noqa: E402
                               work_files)

from autoresearchd.gitrepo import GitRepo  # noqa: E402
from autoresearchd.patching import apply_diff, extract_diff  # noqa: E402


def run_ours(repo: GitRepo, diff: str) -> dict[str, bytes] | None:
    res = apply_diff(repo, "main", diff, rules())
    return repo.read_files(res.tree) if res.ok else None


def run_tool(template: Path, argv: list[str], diff: str) -> dict[str, bytes] | None:
    with tempfile.TemporaryDirectory(prefix="ard-bench-") as d:
        work = Path(d) / "w"
        shutil.copytree(template, work, symlinks=True)
        p = subprocess.run(argv, cwd=work, input=diff.encode(), capture_output=True)
        if p.returncode != 0:
            return None
        files = work_files(work)
        return {k: v for k, v in files.items() if not k.endswith((".orig", ".rej"))}


def main() -> int:
    have_patch = shutil.which("patch") is not None
    tools = {"ours": None, "git apply": ["git", "apply", "-"]}
    if have_patch:
        tools["patch -p1"] = ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-s"]
    stats = {t: {"ok": 0, "wrong": 0, "fail": 0, "unsafe_applied": 0} for t in tools}
    wrong_names: dict[str, list[str]] = {t: [] for t in tools}
    with tempfile.TemporaryDirectory(prefix="ard-bench-") as d:
        template = make_base_repo(Path(d) / "base")
        repo = GitRepo(template)
        n_apply = n_refuse = 0
        for name in sorted(CASES):
            spec = CASES[name]
            diff = extract_diff(response(name)) or ""
            want = expected_files(spec) if spec["expect"] == "applied" else None
            n_apply += want is not None
            n_refuse += want is None
            for tool, argv in tools.items():
                got = run_ours(repo, diff) if argv is None else run_tool(template, argv, diff)
                s = stats[tool]
                if want is None:
                    if got is not None and got != work_files(template):
                        s["unsafe_applied"] += 1
                        wrong_names[tool].append(name)
                elif got is None:
                    s["fail"] += 1
                elif got == want:
                    s["ok"] += 1
                else:
                    s["wrong"] += 1
                    wrong_names[tool].append(name)
    print(f"corpus: {n_apply} diffs that should apply, {n_refuse} that must be refused "
          f"(tests/data/diffs)\n")
    print(f"{'applier':<11} {'recovered':>15} {'wrong apply':>12} {'failed':>7} {'applied a must-refuse':>22}")
    for tool, s in stats.items():
        pct = 100.0 * s["ok"] / max(1, n_apply)
        print(f"{tool:<11} {s['ok']:>4}/{n_apply:<3} {pct:5.1f}% {s['wrong']:>12} {s['fail']:>7} "
              f"{s['unsafe_applied']:>15}/{n_refuse}")
    if not have_patch:
        print("\n(GNU patch not installed: apt-get install -y patch)")
    for tool, names in wrong_names.items():
        if names:
            print(f"\n{tool} applied wrongly: {', '.join(n.removesuffix('.txt') for n in names)}")
    return 0 if stats["ours"]["wrong"] == 0 and stats["ours"]["unsafe_applied"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
