"""The W&B mirror, offline: one run per result note with the expected config and summary, grouped by
epoch and origin, wired as an observer of the real lifecycle writer (store/lifecycle.py) so every
result-note path reaches it (a backfilled decision too), and never a secret in any file."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

from autoresearchd.app import build_daemon
from autoresearchd.config import WandbCfg, load_config
from autoresearchd.store.population import read_population
from autoresearchd.store.lifecycle import Written
from autoresearchd.vocab import Change
from autoresearchd.views.wandb_mirror import CONFIG_KEYS, MIRRORED, WandbMirror, make_mirror

from popbuilder import build_population, write_cfg

FAKE = {"ANTHROPIC_API_KEY": "sk-ant-FAKE-7d1e0c9b5a", "OPENAI_API_KEY": "sk-FAKE-openai-44c2b1",
        "WANDB_API_KEY": "FAKEWANDB" + "7" * 31, "AWS_SECRET_ACCESS_KEY": "FAKE-aws-9f8e7d"}


def wandb_records(path: Path):
    """Decode a .wandb transaction log (LevelDB log format: 32 KiB blocks of framed records)."""
    from wandb.proto import wandb_internal_pb2 as pb
    data, pos, buf, block = path.read_bytes(), 7, b"", 32768
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, typ = struct.unpack("<IHB", data[pos:pos + 7])
        if typ == 0 and length == 0:
            pos += left
            continue
        frag, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if typ in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf + frag if typ == 4 else frag)
            buf = b""
            yield rec
        elif typ == 2:
            buf = frag
        elif typ == 3:
            buf += frag


def wait_written(wdir: Path, n: int, timeout: float = 60.0) -> None:
    """wandb-core finishes writing a run file shortly after run.finish() returns: wait for n runs
    that each end with their exit record."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        files = list(wdir.rglob("offline-run-*/run-*.wandb"))
        if len(files) >= n and all(any(r.WhichOneof("record_type") == "exit" for r in wandb_records(f))
                                   for f in files):
            return
        time.sleep(0.1)
    raise AssertionError(f"W&B did not finish writing {n} runs under {wdir} in {timeout}s")


def runs(wdir: Path) -> list[dict]:
    out = []
    for f in sorted(wdir.rglob("offline-run-*/run-*.wandb")):
        r = {"summary": {}, "config": {}, "group": None, "job_type": None, "tags": [], "name": None}
        for rec in wandb_records(f):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                seen = dict(group=rec.run.run_group, job_type=rec.run.job_type, tags=list(rec.run.tags),
                            name=rec.run.display_name)
                r.update({k: v for k, v in seen.items() if v})    # a later run record may be partial
                r["config"].update({u.key: json.loads(u.value_json) for u in rec.run.config.update})
            elif kind == "summary":
                r["summary"].update({u.key: json.loads(u.value_json) for u in rec.summary.update if u.key})
            elif kind == "config":
                r["config"].update({u.key: json.loads(u.value_json) for u in rec.config.update})
        out.append(r)
    return out


@pytest.fixture
def pop_repo(tmp_path, monkeypatch):
    for k, v in FAKE.items():
        monkeypatch.setenv(k, v)
    wdir = tmp_path / "wandb-dir"
    wdir.mkdir()
    monkeypatch.setenv("WANDB_DIR", str(wdir))
    repo = build_population(tmp_path / "research", 40)
    return repo, read_population(repo, "refs/heads/main"), wdir


def test_disabled_mirror_sends_nothing(pop_repo):
    repo, pop, wdir = pop_repo
    from autoresearchd.research import load_manifest
    m = WandbMirror(WandbCfg(enabled=False), load_manifest(repo, "refs/heads/main"), dir=wdir)
    i = pop.succeeded()[0]
    m(i.commit, i, i.note)
    assert m.logged == 0 and not list(wdir.rglob("*.wandb"))


def test_payload_is_an_allow_list(pop_repo):
    repo, pop, _ = pop_repo
    from autoresearchd.research import load_manifest
    m = WandbMirror(WandbCfg(enabled=True), load_manifest(repo, "refs/heads/main"), repo=repo)
    i = next(i for i in pop.succeeded() if len(i.note.values) > 1)
    p = m.payload(i.commit, i, i.note)
    assert tuple(p["config"]) == CONFIG_KEYS
    assert p["group"] == f"epoch-{i.epoch:03d}" and p["job_type"] == i.origin and i.origin in p["tags"]
    assert p["summary"]["values"] == i.note.values and p["summary"]["val_loss"] == i.value
    assert not any(v in json.dumps(p) for v in FAKE.values())


def the_mirror(daemon) -> WandbMirror:
    """The mirror build_daemon gave the daemon's lifecycle writer when it built it (exactly one)."""
    mirrors = [o.__self__ for o in daemon.lifecycle.observers if isinstance(getattr(o, "__self__", None), WandbMirror)]
    assert len(mirrors) == 1, daemon.lifecycle.observers
    return mirrors[0]


def test_offline_runs_through_the_lifecycle_writer_hold_results_and_no_secret(pop_repo, tmp_path):
    repo, pop, wdir = pop_repo
    cfg = load_config(write_cfg(tmp_path, repo.path, '[wandb]\nenabled = true\nmode = "offline"\n'))
    daemon = build_daemon(cfg)
    mirror = the_mirror(daemon)                 # wired by construction: nothing attached afterwards
    picked = [i for i in pop.ideas if i.note is not None and i.branch][:3]
    failed = next(i for i in pop.ideas if i.note is not None and i.value is None and i.branch)
    for i in picked + [failed]:
        daemon.lifecycle.result(i.commit, i, i.note)       # the real writer, which tells its observers
    daemon.lifecycle.result(pop.baseline_commit, None, pop.baseline_note)
    assert mirror.flush(120) and mirror.failed == 0 and mirror.logged == 5
    wait_written(wdir, 5)
    got = runs(wdir)
    assert len(got) == 5
    by_name = {r["name"]: r for r in got}
    assert len(by_name) == 5, [(r["name"], r["group"]) for r in got]
    for i in picked:
        r = by_name[i.idea_id]
        for k in ("value", "values", "delta", "decision", "status", "wall_s", "gpu_s", "cost_usd"):
            assert k in r["summary"], (k, r["summary"])
        if i.value is not None:     # what the delta is (paired by seed, or vs the baseline mean)
            assert r["summary"]["delta_kind"] in ("paired by seed", "vs baseline mean"), r["summary"]
        assert r["summary"]["status"] == i.note.status.value
        assert r["config"]["idea_id"] == i.idea_id and r["config"]["commit"] == i.commit
        assert r["group"] == f"epoch-{i.epoch:03d}" and r["job_type"] == i.origin
        assert not {k for k in r["config"] if not k.startswith("_")} - set(CONFIG_KEYS)
    assert by_name[failed.idea_id]["summary"]["status"] == failed.note.status.value
    assert by_name["baseline"]["group"] == "baseline"
    # the idea text and diff were logged as an html panel
    htmls = list(wdir.rglob("*.html"))
    assert htmls and any("diff --git" in h.read_text() for h in htmls)
    # nothing secret anywhere: not in run files, logs, metadata
    files = [f for f in wdir.rglob("*") if f.is_file()]
    assert files
    for f in files:
        data = f.read_bytes()
        for name, value in FAKE.items():
            assert value.encode() not in data, f"{name} leaked into {f}"
    mirror.close()


def test_no_mirror_when_disabled(pop_repo, tmp_path):
    repo, _, _ = pop_repo
    cfg = load_config(write_cfg(tmp_path, repo.path))
    daemon = build_daemon(cfg)
    assert make_mirror(cfg, daemon.research) is None and daemon.lifecycle.observers == ()


def test_a_backfilled_decision_reaches_wandb(pop_repo, tmp_path):
    """A note written before the baseline was measured gets its baseline, delta and decision from the
    daemon's backfill; that write reaches the mirror like any result (it once went straight to the
    ledger, and W&B kept the run without its decision)."""
    from autoresearchd.store.ledger import Ledger
    repo, pop, wdir = pop_repo
    cfg = load_config(write_cfg(tmp_path, repo.path, '[wandb]\nenabled = true\nmode = "offline"\n'))
    daemon = build_daemon(cfg, with_llm=False)
    mirror = the_mirror(daemon)
    early = [i for i in pop.ideas if i.note is not None and i.branch and i.value is not None
             and not pop.stale(i)][:2]
    assert len(early) == 2
    for i in early:          # as measured before the baseline's note existed: nothing to compare with
        n = i.note.model_copy(deep=True)
        n.baseline = n.delta = n.decision = None
        Ledger(repo).write_note(i.commit, n)
    assert daemon.collector.backfill(read_population(repo, "refs/heads/main"))
    after = read_population(repo, "refs/heads/main")
    assert all(after.by_commit[i.commit].note.baseline is not None for i in early)
    assert mirror.flush(120) and mirror.failed == 0 and mirror.logged == 2
    wait_written(wdir, 2)
    by_name = {r["name"]: r for r in runs(wdir)}
    for i in early:
        got, note = by_name[i.idea_id]["summary"], after.by_commit[i.commit].note
        assert got["delta"] == pytest.approx(note.delta, rel=1e-6) and got.get("decision") == note.decision
    mirror.close()


def test_the_mirror_hears_only_the_mirrored_changes(pop_repo):
    """Every change the writer makes is offered to the mirror; only MIRRORED ones become runs (a failed
    implementation or a dropped duplicate ran nothing); a change without a note is never one."""
    repo, pop, wdir = pop_repo
    from autoresearchd.research import load_manifest
    m = WandbMirror(WandbCfg(enabled=True, mode="offline"), load_manifest(repo, "refs/heads/main"),
                    repo=repo, dir=wdir, background=False)
    sent = []
    m._log = lambda payload, diff: sent.append(payload["id"])     # count what would be sent, not send it
    i = next(i for i in pop.ideas if i.note is not None and i.branch)
    for change in Change:
        m.written(Written(change, i.commit, i, i.note))
    m.written(Written(Change.RESULT, i.commit, i, None))
    assert len(sent) == len(MIRRORED) and set(MIRRORED) < set(Change)
