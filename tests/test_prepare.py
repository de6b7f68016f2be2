"""The once-per-host `prepare` step: it runs once per host and input hash however many trials run
(two at once included), its output reaches setup, run, evaluate and check as $AUTORESEARCH_PREPARED,
a failure is a note that says so, and `check` runs where prepare has run."""

from __future__ import annotations

from autoresearchd.app import make_llm
from autoresearchd.makelifecycle import make_lifecycle
from autoresearchd.config import load_config
from autoresearchd.implement.implementer import Implementer
from autoresearchd.manifest import parse_manifest
from autoresearchd.policies.base import Proposal
from autoresearchd.research import open_research
from autoresearchd.runners.prepare import prepare_key
from autoresearchd.store.notes import Status

from conftest import TOY_MANIFEST, branch_idea, run_until_settled, write_config
from fake_llm import FakeLLM, Reply

PREPARE = "prepare.py"
PREPARE_PY = """import os, pathlib
out = pathlib.Path(os.environ["AUTORESEARCH_PREPARED"])
(out / "data.txt").write_text("0.25")
with open(os.environ["COUNTER"], "a") as f:       # outside every trial dir: counts the runs
    f.write("prepared\\n")
"""
RUN = """import os, random
random.seed(int(os.environ["AUTORESEARCH_SEED"]))
base = float(open(os.path.join(os.environ["AUTORESEARCH_PREPARED"], "data.txt")).read())
x = 1.0
with open("out.txt", "w") as f:
    f.write(str(base + x + random.random() * 0.01))
"""
EVAL = """import os
assert os.path.isfile(os.path.join(os.environ["AUTORESEARCH_PREPARED"], "data.txt")), "no prepared data"
v = float(open(os.path.join(os.environ["AUTORESEARCH_ARTIFACTS"], "out.txt")).read())
print("---")
print(f"score: {v}")
"""


def _env(make_repo, tmp_path, prepare='python3 prepare.py', check=""):
    counter = tmp_path / "count.txt"
    manifest = TOY_MANIFEST.replace('artifacts =', f'prepare = "{prepare}"\nprepare_inputs = ["{PREPARE}"]\n'
                                    f'{check}[env.data]\nCOUNTER = "{counter}"\n[env.x]\nartifacts =')
    # [env.data] must be the last table: move artifacts/context back under [env]
    head, _, tail = manifest.partition("[env.x]\n")
    manifest = head.replace("[env.data]", tail + "[env.data]")
    repo = make_repo({".autoresearch.toml": manifest, "run.py": RUN, "evaluate.py": EVAL, PREPARE: PREPARE_PY},
                     "research")
    return repo, counter


def test_prepare_runs_once_per_host_and_feeds_every_step(make_repo, tmp_path):
    repo, counter = _env(make_repo, tmp_path)
    branch_idea(repo, "bob/lower", "Lower x", {"run.py": RUN.replace("x = 1.0", "x = 0.5")})
    cfg = write_config(tmp_path, repo)        # two slots, two baseline seeds: two trials at once
    pop = run_until_settled(cfg, timeout=120)
    assert pop.baseline_note.status == Status.SUCCEEDED and len(pop.baseline_note.values) == 2
    assert 1.25 < pop.baseline_note.value < 1.27          # run read the prepared data, evaluate saw it
    idea = next(i for i in pop.ideas if "bob/lower" in (i.branch or ""))
    assert idea.note.status == Status.SUCCEEDED and 0.75 < idea.note.value < 0.77
    assert counter.read_text().splitlines() == ["prepared"], "prepare ran more than once on one host"


def test_prepare_key_covers_command_inputs_and_data():
    m = parse_manifest(TOY_MANIFEST.replace('artifacts =', 'prepare = "python3 p.py"\nartifacts ='))
    k = prepare_key(m, [("p.py", "a" * 40)])
    assert k == prepare_key(m, [("p.py", "a" * 40)])
    assert k != prepare_key(m, [("p.py", "b" * 40)])                       # an input changed
    assert k != prepare_key(m.model_copy(update={"prepare": "python3 p.py --v2"}), [("p.py", "a" * 40)])
    assert k != prepare_key(m.model_copy(update={"data": {"D": "/x"}}), [("p.py", "a" * 40)])
    assert m.model_copy(update={"prepare_inputs": ["p.py"]}).is_frozen("p.py")   # ideas cannot edit them


def test_failed_prepare_is_a_note_that_says_so(make_repo, tmp_path, monkeypatch):
    repo, _ = _env(make_repo, tmp_path, prepare="echo no dataset here >&2; exit 3")
    monkeypatch.setenv("AUTORESEARCHD_DAEMON__MAX_RETRIES", "0")     # a failed baseline seed is not rerun
    pop = run_until_settled(write_config(tmp_path, repo), timeout=120)
    n = pop.baseline_note
    assert n.status == Status.FAILED and "prepare exited 3" in n.error and "no dataset here" in n.error


GOOD = """```diff
--- a/run.py
+++ b/run.py
@@ -4,3 +4,3 @@
 base = float(open(os.path.join(os.environ["AUTORESEARCH_PREPARED"], "data.txt")).read())
-x = 1.0
+x = 0.5
 with open("out.txt", "w") as f:
```
"""


def test_check_runs_where_prepare_has_run(make_repo, tmp_path):
    check = 'check = "python3 -c \\"import os; open(os.environ[\'AUTORESEARCH_PREPARED\'] + \'/data.txt\')\\""\n'
    repo, counter = _env(make_repo, tmp_path, check=check)
    with FakeLLM() as fake:
        cfg_path = tmp_path / "c.toml"
        cfg_path.write_text(f'[research]\nrepo = "{repo}"\n[llm]\nprovider = "openai"\nbase_url = "{fake.openai_url}"\n'
                            'model = "m"\nbackoff_s = 0.01\ntimeout_s = 5\n[implementer]\nmax_revisions = 0\n')
        cfg = load_config(cfg_path)
        research = open_research(cfg)
        impl = Implementer(research, make_llm(cfg, research)[0], cfg, make_lifecycle(cfg, research))
        fake.script(Reply(GOOD))
        idea_id = impl.record_proposal(Proposal(title="Lower x", text="x = 0.5", origin="explore", epoch=1))
        branch = impl.implement(idea_id)
        if branch is None:
            rec = research.repo.rev_parse("refs/autoresearch/records/" + idea_id)
            raise AssertionError(research.repo.note_read("refs/notes/autoresearch", rec))
    assert counter.read_text().splitlines() == ["prepared"]


def test_run_check_without_a_cache_prepares_first(make_repo, tmp_path):
    """`doctor --run` checks the baseline with run_check alone: prepare runs first there too."""
    from autoresearchd.implement.implementer import run_check
    from autoresearchd.store.gitrepo import GitRepo
    check = 'check = "test -s \\"$AUTORESEARCH_PREPARED/data.txt\\""\n'
    repo, counter = _env(make_repo, tmp_path, check=check)
    g = GitRepo(repo)
    m = parse_manifest(g.read_blob("main:.autoresearch.toml").decode())
    assert run_check(m, g.archive("main"), 60) is None
    assert counter.read_text().splitlines() == ["prepared"]
    bad = m.model_copy(update={"prepare": "exit 4"})
    assert "prepare step `exit 4` failed" in run_check(bad, g.archive("main"), 60)
