"""Replay mode as the daemon uses it: the position in the replay file is kept in git and a restart
resumes after it; titles with underscores match their record; `queue "text"` says at once when
the replay file cannot implement it, and implements it when it can. Real git, real CLI."""

import json

from autoresearchd.app import build_daemon, make_llm
from autoresearchd.cli import main
from autoresearchd.config import load_config
from autoresearchd.llm.replay import format_idea, to_record
from autoresearchd.policies.prompting import parse_ideas
from autoresearchd.research import open_research
from autoresearchd.store.population import read_population

from conftest import TOY_RUN, git, write_config


def _diff(value: str) -> str:
    return ("--- a/run.py\n+++ b/run.py\n@@ -2,3 +2,3 @@ import os, random\n"
            " random.seed(int(os.environ.get(\"AUTORESEARCH_SEED\", \"0\")))\n"
            f"-x = 1.0\n+x = {value}\n"
            " with open(\"out.txt\", \"w\") as f:\n")


RECORDS = [{"title": f"Set x_scale to {v}", "idea": f"[Experiment] Set x_scale to {v}\n[Code Changes] x = {v}.",
            "code_diff": _diff(v)} for v in ("0.9", "0.8", "0.7", "0.6")]


def _config(tmp_path, toy_env):
    replay = tmp_path / "ideas.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    cfg = write_config(tmp_path, toy_env)
    cfg.write_text(cfg.read_text().replace('provider = "none"', f'provider = "replay"\nreplay_file = "{replay}"'))
    return cfg


def _propose(provider, n):
    c = provider.complete([{"role": "user", "content": "ideas"}], purpose="propose", meta={"n": n})
    return [i.title for i in parse_ideas(c.text)]


def test_restart_resumes_the_replay_where_it_stopped(toy_env, tmp_path):
    cfg = load_config(_config(tmp_path, toy_env))
    research = open_research(cfg)
    first, note = make_llm(cfg, research)
    assert _propose(first, 2) == ["Set x_scale to 0.9", "Set x_scale to 0.8"]
    assert git(toy_env, "cat-file", "-t", "refs/autoresearch/replay").strip() == "blob"   # the position, in git
    # a restart knows nothing in memory, and no idea made it into the population: git alone resumes it
    again, note = make_llm(cfg, open_research(cfg))
    assert "resuming after 2 of 4 records" in note
    assert _propose(again, 5) == ["Set x_scale to 0.7", "Set x_scale to 0.6"]
    # an edited replay file is a different file: it starts from its beginning
    (tmp_path / "ideas.jsonl").write_text(json.dumps(RECORDS[0]) + "\n")
    fresh, _ = make_llm(cfg, open_research(cfg))
    assert _propose(fresh, 1) == ["Set x_scale to 0.9"]


def test_titles_with_underscores_match_their_record(toy_env, tmp_path):
    cfg = load_config(_config(tmp_path, toy_env))
    provider, _ = make_llm(cfg, open_research(cfg))
    rec = to_record(RECORDS[2])
    parsed = parse_ideas(format_idea(rec))[0]
    assert parsed.title == "Set x_scale to 0.7"            # the policy keeps an underscore inside a word
    assert provider.find(parsed.title) is provider.records[2]
    assert provider.find("Set **x_scale** to 0.7") is provider.records[2]
    assert provider.remaining(known_titles=[parsed.title]) == 3    # a known title is skipped on resume


def test_queue_text_in_replay_mode(toy_env, tmp_path, monkeypatch, capsys):
    cfg_path = _config(tmp_path, toy_env)
    assert main(["--config", str(cfg_path), "queue", "Use a cosine schedule that decays to zero"]) == 2
    err = capsys.readouterr().err
    assert "replay mode (llm.provider = \"replay\") cannot implement free text" in err and "ideas.jsonl" in err
    assert len(err.strip().splitlines()) == 1
    research = open_research(load_config(cfg_path))
    assert not read_population(research.repo, research.baseline_ref).ideas     # nothing was queued
    # a recorded idea, in other words around its title, is queued under the record's title and implemented
    assert main(["--config", str(cfg_path), "queue", "Please set x_scale to 0.6 and see"]) == 0
    d = build_daemon(load_config(cfg_path))
    idea = read_population(d.repo, d.research.baseline_ref).implementing()[0]
    assert idea.title == "Set x_scale to 0.6" and idea.origin == "human"
    assert d.implementer.implement(idea.idea_id)
    done = read_population(d.repo, d.research.baseline_ref).by_id[idea.idea_id]
    assert done.branch and "x = 0.6" in git(toy_env, "show", done.commit + ":run.py")
    assert TOY_RUN.replace("x = 1.0", "x = 0.6") == git(toy_env, "show", done.commit + ":run.py")
    d.runner.close()
