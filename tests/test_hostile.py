"""Hostile input, each refused before anything runs, with a note that says why:
- LLM diffs (through the implementer and the daemon): '../', absolute paths, .git/, symlinks out of
  the tree, frozen files, giant files, binary patches;
- pushed branches that do the same (symlink, frozen edit, giant or binary file, unrelated history);
- branch names and idea texts with ';', '$()', backticks, newlines and unicode: no shell injection
  (marker files are never created) and the branch is still run and noted; the CLI views too;
- a config file with wrong types: exit 2 and one line.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fake_llm import FakeLLM, Reply

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status, parse_note

from conftest import TOY_RUN, branch_idea, git
from fixtures_reliability import ToyLLM, invariants, llm_config, run_until_idle, toy_diff, write_cfg

BINARY = """```diff
diff --git a/blob.bin b/blob.bin
new file mode 100644
index 0000000000000000000000000000000000000000..c94be360bed0ec4a68f71962ebea3a94282471b1
GIT binary patch
literal 10
RcmZQzWJ=1+ODw8n000X)0*L?s

literal 0
HcmV?d00001

```"""


def new_file(path: str, lines: list[str], header: str = "") -> str:
    body = "".join(f"+{ln}\n" for ln in lines)
    return (f"```diff\n{header}--- /dev/null\n+++ {path if path.startswith('/') else 'b/' + path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}```\n")


def hostile_diffs(marker: Path) -> dict[int, tuple[str, str]]:
    """idea number -> (diff reply, word the refusal must contain)."""
    return {
        0: (new_file("../escape.py", [f"open({str(marker)!r}, 'w')"]), ".."),
        1: (new_file(str(marker), ["pwned"]), "absolute"),
        2: (new_file(".git/hooks/post-checkout", ["#!/bin/sh", f"touch {marker}"]), ".git"),
        3: ("```diff\ndiff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n"
            "+/etc/passwd\n\\ No newline at end of file\n```\n", "symbolic link"),
        4: ("```diff\n--- a/evaluate.py\n+++ b/evaluate.py\n@@ -1,2 +1,2 @@\n-import os\n+import os  # cheat\n"
            " v = float(open(os.path.join(os.environ[\"AUTORESEARCH_ARTIFACTS\"], \"out.txt\")).read())\n```\n",
            "frozen"),
        5: (new_file("big.txt", ["x" * 100] * 300), "bytes"),
        6: (BINARY, "binary"),
    }


def test_hostile_llm_diffs_are_refused_before_anything_runs(toy_env, tmp_path):
    marker = tmp_path / f"pwned-{uuid.uuid4().hex[:6]}"
    diffs = hostile_diffs(marker)

    def implement(req, value):
        k = round((value - 0.5) * 1000)
        return Reply(diffs[k][0] if k in diffs else toy_diff(value))
    with FakeLLM() as fake:
        fake.script(*[ToyLLM(implement=implement)] * 100)
        llm = llm_config(fake.openai_url, max_ideas=8)
        cfg = write_cfg(tmp_path / "cfg", toy_env, llm=llm, rest="")
        text = cfg.read_text().replace("max_revisions = 0\n", "max_revisions = 1\nmax_file_bytes = 20000\n"
                                       "max_diff_bytes = 60000\n")
        cfg.write_text(text)
        run_until_idle(cfg, timeout=150)
    repo = GitRepo(toy_env)
    notes = invariants(repo)                       # the clean ideas ran and succeeded
    assert notes and all(int(repo.commit_message(c).split()[1]) not in diffs for c in notes)
    records = {}
    for ref, sha in repo.refs("refs/autoresearch/records/").items():
        title = repo.commit_message(sha).splitlines()[0]
        records[int(title.split()[1])] = parse_note(repo.note_read("refs/notes/autoresearch", sha))
    for k, (_, word) in diffs.items():
        n = records.get(k)
        assert n is not None, f"hostile diff {k} left no record"
        assert n.status in (Status.REJECTED, Status.IMPLEMENT_FAILED), (k, n.status)
        assert word in (n.error or ""), f"diff {k}: {n.error!r} does not mention {word!r}"
        assert not n.trials
    assert not marker.exists() and not (toy_env.parent / "escape.py").exists()
    assert not (toy_env / ".git/hooks/post-checkout").exists()
    trials_dir = toy_env / ".git/autoresearch"
    ran = {p.name for p in trials_dir.rglob("trial.sh")} if trials_dir.exists() else set()
    assert len(ran) <= 1 + len(notes)   # only the baseline and the clean ideas were ever placed on a runner


def _commit_tree(repo: Path, entries: list[tuple[str, str, bytes]], message: str, parent: str | None = "main") -> str:
    """A commit of main's tree plus (mode, path, data) entries, built with plumbing (symlinks included)."""
    idx = repo.parent / f"idx-{uuid.uuid4().hex[:6]}"
    env = {"GIT_INDEX_FILE": str(idx)}
    run = lambda *a, **k: subprocess.run(["git", "-C", str(repo), *a], capture_output=True, check=True,
                                         env={**__import__("os").environ, **env, "GIT_AUTHOR_NAME": "h",
                                              "GIT_AUTHOR_EMAIL": "h@h", "GIT_COMMITTER_NAME": "h",
                                              "GIT_COMMITTER_EMAIL": "h@h"}, **k).stdout.decode().strip()
    run("read-tree", "main")
    for mode, path, data in entries:
        sha = run("hash-object", "-w", "--stdin", input=data)
        run("update-index", "--add", "--cacheinfo", f"{mode},{sha},{path}")
    tree = run("write-tree")
    idx.unlink()
    return run("commit-tree", tree, *(["-p", parent] if parent else []), input=message.encode())


def test_hostile_pushed_branches_are_rejected_with_reasons(toy_env, tmp_path):
    counter = tmp_path / "ran.log"
    run_py = TOY_RUN.replace("x = 1.0", f"open({str(counter)!r}, 'a').write('ran\\n')\nx = 0.8").encode()
    cases = {
        "symlink": ([("120000", "data", b"/etc/passwd"), ("100644", "run.py", run_py)], "symbolic link"),
        "frozen": ([("100644", "evaluate.py", b"print('---')\nprint('score: 0.0')\n"),
                    ("100644", "run.py", run_py)], "frozen"),
        "giant": ([("100644", "weights.txt", b"0" * 1_200_000), ("100644", "run.py", run_py)], "bytes"),
        "binary": ([("100644", "blob.bin", b"\0\1\2binary\0"), ("100644", "run.py", run_py)], "binary"),
        "gitdir": ([("100644", ".git/hooks/post-checkout", b"#!/bin/sh\ntouch /tmp/x\n"),
                    ("100644", "run.py", run_py)], ".git"),
    }
    repo = GitRepo(toy_env)
    shas = {}
    for name, (entries, _) in cases.items():
        try:
            shas[name] = _commit_tree(toy_env, entries, f"hostile {name}\n")
        except subprocess.CalledProcessError as e:      # git itself refuses some trees (e.g. .git paths)
            assert name == "gitdir", e.stderr
            continue
        repo.update_ref(f"refs/heads/idea/evil/{name}", shas[name])
    unrelated = _commit_tree(toy_env, [("100644", "run.py", run_py)], "no shared history\n", parent=None)
    repo.update_ref("refs/heads/idea/evil/unrelated", unrelated)
    run_until_idle(write_cfg(tmp_path / "cfg", toy_env), timeout=90)
    for name, sha in shas.items():
        n = parse_note(repo.note_read("refs/notes/autoresearch", sha))
        assert n is not None and n.status == Status.REJECTED, (name, n)
        assert cases[name][1] in n.error, f"{name}: {n.error!r}"
    n = parse_note(repo.note_read("refs/notes/autoresearch", unrelated))
    assert n.status == Status.REJECTED and "no merge-base" in n.error
    assert not counter.exists(), "a rejected branch ran"
    invariants(repo, allow=("rejected",))


INJECT = ["a;touch${IFS}%s", "$(touch${IFS}%s)", "`touch${IFS}%s`", "x'$(touch${IFS}%s)'", "ünï€-%s"]


def test_shell_metacharacters_in_branch_names_and_texts_are_inert(toy_env, tmp_path):
    mdir = tmp_path / "markers"
    mdir.mkdir()
    markers = []
    shas = {}
    for k, pattern in enumerate(INJECT):
        m = mdir / f"m{k}"
        markers.append(m)
        name = "inj/" + pattern % m
        text = f"Idea {k} $(touch {m}) `touch {m}`; touch {m}\n\nLine two\n$(touch {m})\n\u202e unicode \u00e9\u4e2d"
        sha = branch_idea(toy_env, f"inj{k}", text, {"run.py": TOY_RUN.replace("x = 1.0", f"x = 0.{k + 1}")})
        ref = f"refs/heads/idea/{name}"
        git(toy_env, "update-ref", ref, sha)
        git(toy_env, "update-ref", "-d", f"refs/heads/idea/inj{k}")
        shas[ref] = sha
    cfg = write_cfg(tmp_path / "cfg", toy_env)
    run_until_idle(cfg, timeout=120)
    repo = GitRepo(toy_env)
    notes = invariants(repo)
    for ref, sha in shas.items():
        assert sha in notes and notes[sha].status == Status.SUCCEEDED, ref
    # the read-only views print the hostile names and texts without running them
    for args in (["status"], ["ideas"], ["ideas", "--json"], ["show", list(shas)[1].removeprefix("refs/heads/")],
                 ["show", "--log", list(shas)[2].removeprefix("refs/heads/")],
                 ["queue", f"Try $(touch {markers[0]}) and `touch {markers[1]}`; touch {markers[2]}"]):
        p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (args, p.stderr)
    time.sleep(0.2)
    assert not any(m.exists() for m in markers), [m for m in markers if m.exists()]


@pytest.mark.parametrize("bad, key", [
    ('[runner]\nslots = "many"\n', "runner.slots"),
    ("[daemon]\ntick_s = [1, 2]\n", "daemon.tick_s"),
    ('[llm]\nmax_retries = "three"\n', "llm.max_retries"),
    ("[policy]\nbaseline_seeds = 2.5\n", "policy.baseline_seeds"),
    ('[runner]\nhosts = "gpu1"\n', "runner.hosts"),
    ("[research\nrepo = 1\n", "invalid TOML"),
])
def test_config_with_wrong_types_exits_2_with_one_line(tmp_path, bad, key):
    cfg = tmp_path / ".autoresearch.toml"
    cfg.write_text(bad)
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "status"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in p.stderr, p.stderr
