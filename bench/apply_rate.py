"""How many realistic, malformed LLM diffs apply without another LLM round trip, and how many apply WRONG.

Runs the corpus in tests/data/diffs through three appliers, each given the same text (the diff that
`extract_diff` found in the model's answer, so the baselines are not penalised for prose and fences):
  ours       autoresearchd.implement.patching.apply_diff (git apply, repaired diff, fuzzy locator, safety gates)
  git apply  plain `git apply` in a fresh checkout of the base codebase
  patch -p1  GNU patch (default fuzz 2) in a fresh checkout
"recovered" = the result equals the expected files exactly; "wrong" = it applied but the files differ.
Cases that must NOT apply (unsafe, ambiguous, truncated, broken) are counted separately: applying one
of them is a wrong apply too. A second table does the same for randomly mangled diffs of random edits.
A third (bench/implementers.py) sends scripted multi-file and check-failing ideas through each
implementer end to end: the diff implementer and the coding-agent CLIs (`claude`, `codex`, when installed).

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

from autoresearchd.implement.patching import apply_diff, extract_diff
from autoresearchd.store.gitrepo import GitRepo
from fixtures_patching import (
    CASES,
    DATA,
    expected_files,
    make_base_repo,
    mangled_cases,
    response,
    rules,
    work_files,
)


def run_ours(repo: GitRepo, diff: str) -> dict[str, bytes] | None:
    res = apply_diff(repo, "main", diff, rules())
    return repo.read_files(res.tree) if res.ok else None


def run_tool(argv: list[str], diff: str) -> dict[str, bytes] | None:
    """Run a baseline applier in a fresh plain copy of the base codebase (outside any repo)."""
    with tempfile.TemporaryDirectory(prefix="ard-bench-") as d:
        work = Path(d) / "w"
        shutil.copytree(DATA / "base", work)
        p = subprocess.run(argv, cwd=work, input=diff.encode(), capture_output=True, check=False)
        if p.returncode != 0:
            return None
        files = work_files(work)
        return {k: v for k, v in files.items() if not k.endswith((".orig", ".rej"))}


def tools() -> dict[str, list[str] | None]:
    t = {"ours": None, "git apply": ["git", "apply", "-"]}
    if shutil.which("patch"):
        t["patch -p1"] = ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-s"]
    return t


def corpus_table() -> int:
    tools_ = tools()
    stats = {t: {"ok": 0, "wrong": 0, "fail": 0, "unsafe_applied": 0} for t in tools_}
    wrong_names: dict[str, list[str]] = {t: [] for t in tools_}
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
            for tool, argv in tools_.items():
                got = run_ours(repo, diff) if argv is None else run_tool(argv, diff)
                s = stats[tool]
                if want is None:
                    if got is not None and got != work_files(DATA / "base"):
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
    if "patch -p1" not in tools_:
        print("\n(GNU patch not installed: apt-get install -y patch)")
    for tool, names in wrong_names.items():
        if names:
            print(f"\n{tool} applied wrongly: {', '.join(n.removesuffix('.txt') for n in names)}")
    return stats["ours"]["wrong"] + stats["ours"]["unsafe_applied"]


def mangled_table(n: int, seed: int) -> int:
    """Random edits written as diffs with random LLM slips (fixtures_patching.mangle)."""
    tools_ = tools()
    cases = mangled_cases(seed, n)
    stats = {t: [0, 0] for t in tools_}               # recovered, wrong
    with tempfile.TemporaryDirectory(prefix="ard-bench-") as d:
        repo = GitRepo(make_base_repo(Path(d) / "base"))
        base = work_files(DATA / "base")
        for text, path, new, _ in cases:
            diff = extract_diff(text) or ""
            want = dict(base, **{path: new.encode()})
            for tool, argv in tools_.items():
                got = run_ours(repo, diff) if argv is None else run_tool(argv, diff)
                if got is not None and got != base:
                    stats[tool][0 if got == want else 1] += 1
    print(f"\nrandomly mangled diffs: {n} (seed {seed}; slips: no a/ b/, wrong or missing @@ numbers, "
          "line-number prefixes, lost context markers, 2-space re-indent, dropped or drifted context, "
          "trailing spaces, fences)\n")
    print(f"{'applier':<11} {'recovered':>15} {'wrong apply':>12}")
    for tool, (ok, wrong) in stats.items():
        print(f"{tool:<11} {ok:>4}/{n:<3} {100.0 * ok / n:5.1f}% {wrong:>12}")
    return stats["ours"][1]


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mangled", type=int, default=200, help="random mangled diffs to add (0: none)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-implementers", action="store_true", help="skip the end-to-end implementer table")
    args = ap.parse_args()
    bad = corpus_table()
    if args.mangled:
        bad += mangled_table(args.mangled, args.seed)
    if not args.no_implementers:
        sys.path.insert(0, str(ROOT / "bench"))
        from implementers import implementer_table
        bad += implementer_table(ROOT)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
