"""Coding-agent CLIs as implementers, end to end: the real `claude` and `codex` binaries (installed
by .ci/run under tests/agent_cli/, or found on PATH) run in a scratch worktree inside the sandbox,
against a local server that speaks their streaming APIs with scripted tool calls (fake_agent_api).
Their result goes through the same gates as an LLM diff; every failure is a note with its reason."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from needs import need
from rich.console import Console

from autoresearchd.app import make_llm
from autoresearchd.makelifecycle import make_lifecycle
from autoresearchd.config import load_config
from autoresearchd.implement.implementer import make_implementer
from autoresearchd.policies.base import Proposal
from autoresearchd.research import open_research
from autoresearchd.runners import sandbox
from autoresearchd.store.notes import Status, parse_note
from autoresearchd.store.population import read_population
from autoresearchd.store.refs import RECORDS_PREFIX
from autoresearchd.views.observe import show

from conftest import TOY_EVAL, TOY_MANIFEST, TOY_RUN
from fake_agent_api import Done, Edit, FakeAgentAPI, Hang, Read, Shell, Write

HERE = Path(__file__).parent
KEYS = {"ANTHROPIC_API_KEY": "sk-ant-agentcli-Secret-0123456789", "OPENAI_API_KEY": "sk-oai-agentcli-Secret-9876543210"}
MODEL = {"claude-code": "claude-sonnet-4-5", "codex": "gpt-agentcli"}
BIN = {"claude-code": "claude", "codex": "codex"}


def cli_binary(kind: str) -> str | None:
    local = HERE / "agent_cli" / "node_modules" / ".bin" / BIN[kind]
    return str(local) if local.exists() else shutil.which(BIN[kind])


def needs(kind: str) -> str:
    exe = cli_binary(kind)
    if exe is None:
        need(f"the {BIN[kind]} CLI", "not installed (npm install --prefix tests/agent_cli; .ci/run does)")
    need("node", None if shutil.which("node") else "not installed")
    need("bwrap", sandbox.get("bwrap").available())
    return exe


BOTH = pytest.mark.parametrize("kind", ["claude-code", "codex"])


@pytest.fixture
def agent_setup(make_repo, tmp_path, monkeypatch):
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    # the check reads the prepare step's output, and reports how many key variables the code under
    # check can see (the helper must scrub them)
    manifest = TOY_MANIFEST.replace('context =', 'prepare = "echo tokens-ready > tokens.txt"\n'
                                                 'check = "python3 run.py && cat $AUTORESEARCH_PREPARED/tokens.txt'
                                                 ' && echo KEYS-SEEN=$(printenv | grep -ci api_key)"'
                                                 '\nhidden = ["notes_secret.md"]\ncontext =')
    env = make_repo({".autoresearch.toml": manifest, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL,
                     "lib/util.py": "SCALE = 1.0\n", "notes_secret.md": "do not show"}, "research")
    apis: list[FakeAgentAPI] = []

    def make(kind: str, turns: list, extra: str = "", llm_extra: str = ""):
        exe = needs(kind)
        api = FakeAgentAPI(turns)
        apis.append(api)
        base_url = api.url if kind == "claude-code" else api.url + "/v1"
        cfg_path = tmp_path / f"c-{len(apis)}.toml"
        cfg_path.write_text(
            f'[research]\nrepo = "{env}"\n[llm]\nprovider = "anthropic"\nbase_url = "{api.url}"\n{llm_extra}'
            f'[llm.prices."{MODEL[kind]}"]\ninput = 3.0\noutput = 15.0\n'
            f'[implementer]\nkind = "{kind}"\n[implementer.agent]\ncommand = "{exe}"\n'
            f'model = "{MODEL[kind]}"\nbase_url = "{base_url}"\n{extra or "wall_s = 120"}\n')
        cfg = load_config(cfg_path)
        research = open_research(cfg)
        llm, _ = make_llm(cfg, research)
        impl = make_implementer(research, llm, cfg, make_lifecycle(cfg, research))
        idea_id = impl.record_proposal(Proposal(title="Lower x", text="Set x to 0.5 and scale in lib/util.py.",
                                                origin="explore", epoch=1, model="m"))
        return api, research, impl, idea_id
    yield make, env
    for api in apis:
        api.close()


def record_note(research, idea_id):
    rec = research.repo.rev_parse(RECORDS_PREFIX + idea_id)
    assert rec, "a failed idea must leave a record"
    return parse_note(research.repo.note_read("refs/notes/autoresearch", rec)), rec


def assert_no_key(research, *texts: str):
    """No key in any note, any stored log or transcript blob, any commit, or the texts given."""
    repo = research.repo
    everything = "\n".join(texts) + repo.git("log", "--all", "--format=%B")
    for ref in ("refs/notes/autoresearch", "refs/notes/autoresearch-runs"):
        everything += "\n".join(repo.note_read(ref, obj) or "" for obj in repo.notes_list(ref))
    logs = repo.refs("refs/autoresearch/logs/")
    assert logs, "the transcript is stored under refs/autoresearch/logs/"
    for sha in logs.values():
        everything += (repo.read_blob(sha) or b"").decode(errors="replace")
    for key in KEYS.values():
        assert key not in everything


@BOTH
def test_agent_cli_good_multi_file_edit_lands_as_branch(agent_setup, kind):
    make, env = agent_setup
    turns = [Read("run.py"), Edit("run.py", "x = 1.0", "x = 0.5"),
             Write("lib/util.py", "SCALE = 0.5\n"),
             Shell("autoresearch-check && echo CHECK-PASSED"),
             Shell("ls; test -e notes_secret.md && echo HIDDEN-VISIBLE || echo HIDDEN-ABSENT"),
             Shell("autoresearch-check; printenv | grep -c -i _api_key; echo ENV-PROBED"),
             Done("Lowered x and the scale.")]
    api, research, impl, idea_id = make(kind, turns)
    branch = impl.implement(idea_id)
    assert branch, api.tool_results()
    repo = research.repo
    idea = read_population(repo, research.baseline_ref).by_id[idea_id]
    assert idea.trailers.implementer == kind
    files = repo.read_files(idea.commit, ["run.py", "lib/util.py", "notes_secret.md", "evaluate.py"])
    assert "x = 0.5" in files["run.py"].decode() and files["lib/util.py"] == b"SCALE = 0.5\n"
    assert files["notes_secret.md"] == b"do not show"          # hidden: absent for the agent, kept in the branch
    # exactly the two edits: the check's output (out.txt) stayed in its copy of the worktree
    assert sorted(c.path for c in repo.diff_tree_raw(idea.base_commit, idea.commit)) == ["lib/util.py", "run.py"]
    results = "\n".join(api.tool_results())
    assert "CHECK-PASSED" in results and "HIDDEN-ABSENT" in results and "ENV-PROBED" in results
    assert "KEYS-SEEN=0" in results and "KEYS-SEEN=1" not in results and "KEYS-SEEN=2" not in results
    assert "tokens-ready" in results          # the prepared data, read-only in the sandbox
    if kind == "codex":   # its shell commands do not inherit the key (claude's do: see docs/llm.md)
        assert "\n0\nENV-PROBED" in results
    transcript = json.loads(repo.read_blob(idea.trailers.transcript))
    assert transcript[0]["implementer"] == kind and transcript[0]["session"] == "finished"
    assert len(transcript[0]["events"]) >= 3 and "x = 0.5" in transcript[0]["diff"]
    # usage priced with llm.prices (3 / 15 USD per Mtok), in the trailer and in the LLM budget
    assert idea.trailers.implement_cost_usd > 0
    assert impl.llm.budget.usd == pytest.approx(idea.trailers.implement_cost_usd, rel=1e-6)
    # `show` lists the session and its steps
    con = Console(record=True, width=240)
    assert show(impl.cfg, con, idea_id) == 0
    out = con.export_text()
    assert f"{kind} session finished" in out and "autoresearch-check" in out
    # the key reached the model API (loopback) and nowhere else
    sent = [r["headers"].get("x-api-key") or r["headers"].get("authorization", "") for r in api.requests]
    assert any(KEYS["ANTHROPIC_API_KEY" if kind == "claude-code" else "OPENAI_API_KEY"] in s for s in sent)
    assert_no_key(research)


def test_agent_cli_frozen_file_edit_refused_by_gate(agent_setup):
    make, _ = agent_setup
    kind = "codex"      # the gate is the same for both CLIs; claude meets it in the symlink and key tests
    turns = [Shell("chmod u+w evaluate.py; echo '# cheat: always 0' >> evaluate.py; tail -1 evaluate.py"),
             Done("Changed the evaluator.")]
    api, research, impl, idea_id = make(kind, turns)
    assert impl.implement(idea_id) is None
    note, _ = record_note(research, idea_id)
    assert note.status == Status.REJECTED and "evaluate.py is frozen" in note.error
    assert "cheat" in "\n".join(api.tool_results())      # the edit happened in the worktree, the gate refused it
    assert not research.repo.refs("refs/heads/idea/")


def test_agent_cli_edit_through_symlink_refused(agent_setup):
    make, env = agent_setup
    target = env / "run.py"
    before = target.read_text()
    turns = [Shell(f"ln -s {target} link.py; echo PWNED >> link.py; echo rc=$?"), Done("Linked.")]
    api, research, impl, idea_id = make("claude-code", turns)
    assert impl.implement(idea_id) is None
    note, _ = record_note(research, idea_id)
    assert note.status == Status.REJECTED and "symbolic link at link.py" in note.error
    # the write went nowhere real: the research repo is not in the sandbox (its path may exist there
    # only as empty mount points on the sandbox's own /tmp)
    assert "rc=" in "\n".join(api.tool_results()) and target.read_text() == before


@BOTH
def test_agent_cli_hanging_session_stopped_at_wall_limit(agent_setup, kind):
    make, _ = agent_setup
    api, research, impl, idea_id = make(kind, [Read("run.py"), Hang()], "wall_s = 6\n")
    t0 = time.monotonic()
    assert impl.implement(idea_id) is None
    assert time.monotonic() - t0 < 90
    note, _ = record_note(research, idea_id)
    assert note.status == Status.IMPLEMENT_FAILED and "wall-time limit of 6s" in note.error


@pytest.mark.parametrize("kind,cap,llm_budget", [("claude-code", 1.0, ""), ("codex", 1.0, ""),
                                                 ("codex", 20.0, "budget_usd = 1.0\n")])
def test_agent_cli_session_over_usd_cap_stopped(agent_setup, kind, cap, llm_budget):
    """Stopped at the session's own cap, or at what is left of the LLM budget when that is lower."""
    make, _ = agent_setup
    big = dict(input_tokens=400_000, output_tokens=10)     # $1.20 per request at 3 USD/Mtok
    # eight paid turns: the cap is seen after the first, and the CLI's requests race the watcher that
    # stops it (codex once had four served before the stop landed), so the end must lie well beyond
    turns = [Shell(f"echo {n}", **big) for n in range(8)] + [Done("never reached")]
    api, research, impl, idea_id = make(kind, turns, f"max_usd = {cap}\n", llm_budget)
    assert impl.implement(idea_id) is None
    note, rec = record_note(research, idea_id)
    assert note.status == Status.IMPLEMENT_FAILED and "cost cap" in note.error and note.error.endswith("cap $1"), note.error
    assert api.served < len(turns)                        # stopped early: the last turn is never served
    spent = note.cost["implementation"]
    assert 1.0 < spent < 5.0 and impl.llm.budget.usd == pytest.approx(spent, rel=1e-6)
    assert_no_key(research)


def test_agent_cli_missing_binary_is_a_note(agent_setup, tmp_path):
    make, _ = agent_setup
    api, research, impl, idea_id = make("codex", [Done()])
    impl.acfg.command = str(tmp_path / "no-such-codex")
    assert impl.implement(idea_id) is None
    note, _ = record_note(research, idea_id)
    assert note.status == Status.IMPLEMENT_FAILED and "not found" in note.error and api.served == 0


def test_agent_cli_key_in_change_refused_and_redacted(agent_setup):
    """A model that learned the key and writes it into the worktree: the gate refuses the change
    and the transcript (whose tool calls carry the key) keeps it only as ***."""
    make, _ = agent_setup
    key = KEYS["ANTHROPIC_API_KEY"]
    api, research, impl, idea_id = make("claude-code", [Write("leak.txt", f"token={key}\n"),
                                                        Shell("cat leak.txt"), Done(f"I saved {key}.")])
    assert impl.implement(idea_id) is None
    note, rec = record_note(research, idea_id)
    assert note.status == Status.REJECTED and "API key" in note.error
    transcript = (research.repo.read_blob(note.log) or b"").decode()
    assert "token=***" in transcript
    assert_no_key(research)


def test_agent_cli_unknown_kind_lists_valid_ones(tmp_path, toy_env):
    from autoresearchd.config import ConfigError
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text(f'[research]\nrepo = "{toy_env}"\n[implementer]\nkind = "cursor"\n')
    cfg = load_config(cfg_path)
    with pytest.raises(KeyError, match="valid implementers: claude-code, codex, diff"):
        research = open_research(cfg)
        make_implementer(research, None, cfg, make_lifecycle(cfg, research))
    cfg_path.write_text(f'[research]\nrepo = "{toy_env}"\n[implementer.agent]\nmax_usdd = 1\n')
    with pytest.raises(ConfigError, match="did you mean 'max_usd'"):
        load_config(cfg_path)


def test_agent_cli_doctor_reports_the_cli(agent_setup, tmp_path):
    make, _ = agent_setup
    _, research, impl, _ = make("claude-code", [])
    con = Console(record=True, width=240)
    from autoresearchd.views.doctor import doctor
    doctor(impl.cfg, con)
    out = con.export_text()
    assert "implementer claude-code:" in out and "(Claude Code)" in out and "agent sandbox: bwrap" in out
    assert "ANTHROPIC_API_KEY is set" in out and KEYS["ANTHROPIC_API_KEY"] not in out


def test_agent_cli_codex_turn_cap(agent_setup):
    """Codex has no turn limit of its own: the daemon counts its requests and stops it."""
    make, _ = agent_setup
    turns = [Shell(f"echo step{i}") for i in range(8)] + [Done()]
    api, research, impl, idea_id = make("codex", turns, "max_turns = 2\n")
    assert impl.implement(idea_id) is None
    note, _ = record_note(research, idea_id)
    assert note.status == Status.IMPLEMENT_FAILED and "turns (limit 2)" in note.error, note.error
    assert api.served < 8


def test_agent_cli_start_validation(tmp_path, toy_env):
    """What `start` and `doctor` refuse before any session: an unknown kind, a missing CLI; and the
    warning for an unpriced codex model (its sessions would count as $0)."""
    from autoresearchd.validate import ERROR, WARN, llm_findings
    cfg_path = tmp_path / "c.toml"

    def found(body: str):
        cfg_path.write_text(f'[research]\nrepo = "{toy_env}"\n[llm]\nprovider = "none"\n{body}')
        return [(f.level, f.what) for f in llm_findings(load_config(cfg_path), None)]
    assert (ERROR, "implementer.kind: unknown name 'cursor'; valid: claude-code, codex, diff") in \
        found('[implementer]\nkind = "cursor"\n')
    missing = found(f'[implementer]\nkind = "claude-code"\n[implementer.agent]\ncommand = "{tmp_path}/nope"\n')
    assert any(level == ERROR and "claude-code CLI `claude` was not found" in what for level, what in missing)
    unpriced = found(f'[implementer]\nkind = "codex"\n[implementer.agent]\ncommand = "/bin/true"\n')
    assert [level for level, what in unpriced if "codex reports no cost" in what] == [WARN]


def test_agent_cli_oversized_file_refused_before_it_is_stored(agent_setup):
    make, _ = agent_setup
    api, research, impl, idea_id = make("codex", [Shell("head -c 1500000 /dev/zero | tr '\\\\0' a > big.txt; wc -c big.txt"),
                                                  Done("Added data.")])
    assert impl.implement(idea_id) is None
    note, _ = record_note(research, idea_id)
    assert note.status == Status.REJECTED and "big.txt would be 1500000 bytes" in note.error, note.error
    sizes = research.repo.git("cat-file", "--batch-all-objects", "--batch-check=%(objectsize)").split()
    assert max(int(s) for s in sizes) < 1_000_000          # never hashed into the research repo


def test_agent_cli_worktree_staging_sees_symlinks_and_keeps_hidden(toy_env, tmp_path):
    """The staging step alone (no CLI needed): an edited worktree becomes a tree on top of the
    parent; a symlink stays a symlink for the gate; a withheld hidden file stays as in the parent;
    the worktree's .gitignore'd outputs are left out."""
    import io
    import tarfile
    from autoresearchd.implement.safety import SafetyRules, check_tree_change
    from autoresearchd.store.gitrepo import GitRepo
    repo = GitRepo(toy_env)
    wt = tmp_path / "wt"
    wt.mkdir()
    tarfile.open(fileobj=io.BytesIO(repo.archive("main"))).extractall(wt, filter="data")
    (wt / "run.py").write_text((wt / "run.py").read_text().replace("x = 1.0", "x = 0.5"))
    (wt / "evaluate.py").unlink()                                 # withheld, as a hidden file is
    (wt / ".gitignore").write_text("out/\n")
    (wt / "out").mkdir()
    (wt / "out" / "ckpt.bin").write_bytes(b"\0" * 10)
    tree = repo.tree_from_dir("main", wt, keep=["evaluate.py"])
    assert sorted(c.path for c in repo.diff_tree_raw("main", tree)) == [".gitignore", "run.py"]
    rules = SafetyRules(is_frozen=lambda p: p == "evaluate.py")
    assert check_tree_change(repo, "main", tree, rules) is None
    (wt / "link.py").symlink_to("/etc/passwd")
    tree = repo.tree_from_dir("main", wt, keep=["evaluate.py"])
    assert "symbolic link at link.py" in check_tree_change(repo, "main", tree, rules)
    (wt / "link.py").unlink()
    (wt / "big.txt").write_text("a" * 2000)
    with pytest.raises(ValueError, match="big.txt would be 2000 bytes"):
        repo.tree_from_dir("main", wt, max_file_bytes=1000)
