"""One vocabulary (issue 28): every status, decision, lease state, origin and trial purpose is spelled
once, in daemon/vocab.py; the project's code uses its members, never the literal strings (the rule:
tests/vocabscan.py); notes, leases and every JSON payload hold the same bytes as the plain words did;
a word this daemon does not know is read and kept as a plain str; docs/notes.md lists every member.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import re
import time
from enum import Enum

from autoresearchd.config import load_config
from autoresearchd.store import parsecache
from autoresearchd.store.frozen import freeze_parsed
from autoresearchd.store.ideas import Idea, format_message, idea_from_commit
from autoresearchd.store.notes import Lease, Note, Trial, format_leases, format_note, parse_leases, parse_note
from autoresearchd.store.population import Population
from autoresearchd.views import export
from autoresearchd.views.dashboard import Snapshot
from autoresearchd.views.progress import epoch_counts, running_trials
from autoresearchd.views.summary import leaderboard, load, summary
from autoresearchd.vocab import Decision, LeaseState, Origin, Purpose, Status, known

from popbuilder import build_population, write_cfg
from vocabscan import ENUMS, ROOT, scan


def test_no_literal_vocabulary_in_the_project():
    found = scan()
    assert not found, "spell these with daemon/vocab.py's enums:\n" + "\n".join(found)


def test_the_scan_flags_every_position_and_nothing_unrelated(tmp_path):
    """The rule itself, on a file with one literal in each position (each must be named) and the
    look-alike strings of the project (none may be)."""
    (tmp_path / "daemon").mkdir()
    flagged = {
        'ok = x.decision == "promoted"': "Decision.PROMOTED",
        'ok = lz.state in ("done", "stale")': "LeaseState.DONE",
        'ok = "human" != idea.origin': "Origin.HUMAN",
        'ok = n.status.value == "succeeded"': "Status.SUCCEEDED",
        'ok = getattr(t.status, "value", t.status) == "failed"': "Status.FAILED",
        'ok = r["decision"] in ("worse",)': "Decision.WORSE",
        'ok = (n.decision or "") == "pending"': "Decision.PENDING",
        'lz.state = "lost"': "LeaseState.LOST",
        'lz.state, lz.error = "requeued", "why"': "LeaseState.REQUEUED",
        'purpose = "confirm" if c else "idea"': "Purpose.CONFIRM",
        'Note(origin=tr.origin or "human")': "Origin.HUMAN",
        'row = {"status": s if n else "queued"}': "Status.QUEUED",
        'seeds_needed(None, "baseline")': "Purpose.BASELINE",
        'getattr(lz, "state", "running")': "LeaseState.RUNNING",
        'trailers.get("Origin", "seed")': "Origin.SEED",
        'PREFERRED = ("promoted", "confirmed")': "Decision values",
        'RANK = {"baseline": 0, "confirm": 2}': "Purpose values",
        'class Lease:\n    state: str = "running"': "LeaseState.RUNNING",
        'def decide(v):\n    return "improved" if v else "worse"': "Decision.IMPROVED",
        'ok = h.state != "degraded"': "HostState.DEGRADED",
        'row = {"state": "ok", "reason": None}': "HostState.OK",
        'row.update(state="unreachable")': "HostState.UNREACHABLE",
        'n = sum(1 for s in slots if s.get("state") == "busy")': "SlotState.BUSY",
        'ok = n.decision == "suspicious"': "Status.SUSPICIOUS: a dead comparison",   # a status, never a decision
        'ok = (n.decision or "") == "suspicious"': "Status.SUSPICIOUS: a dead comparison",
    }
    unrelated = [
        'row = {"running": 3, "queued": 1, "epoch": 2}',              # a payload's field names
        'word = "done"\nok = word in ("done", "here", "missing")',     # a runner's own poll words
        'row = dict(status="baseline", colour="failed")',               # a view's own words
        'name = "best_of_n"\nPAGE = self.page("exploit")',               # a policy's name, a prompt page
        'pairs = (("implementing", "implementing"), ("duplicates", "x"))',
        'def colour(n):\n    return "worse"',                            # a CSS class, not a decision
        'GROUPS = ("implement_failed", "check_failed", "crashed")',     # the failures view's groups
        'def seeds_needed(note, purpose): pass',
    ]
    for k, src in enumerate(flagged):
        (tmp_path / "daemon" / f"f{k}.py").write_text(src + "\n")
    for k, src in enumerate(unrelated):
        (tmp_path / "daemon" / f"u{k}.py").write_text(src + "\n")
    found = scan(tmp_path)
    for k, (src, member) in enumerate(flagged.items()):
        assert any(f.startswith(f"daemon/f{k}.py:") and member in f for f in found), (src, found)
    assert not [f for f in found if f.startswith("daemon/u")], found


def test_the_scan_flags_any_vocabulary_word_compared_or_returned_where_ideas_are_judged_and_shown(tmp_path):
    """In daemon/engine/, daemon/views/ and policies/ a status, decision, host or slot state word is flagged
    in any comparison, return or container, whatever the name (the literals views/board.py had); elsewhere
    only keyed positions are; a line saying `# own word:` is passed over."""
    anywhere = {
        'def reason(n):\n    st = n.note.status\n    if st == "duplicate":\n        return "x"': "Status.DUPLICATE",
        'def reason(n):\n    return "implement_failed"': "Status.IMPLEMENT_FAILED",
        'GROUPS = ("implement_failed", "check_failed", "crashed", "timed_out")': "Status.TIMED_OUT",
        'def f(word):\n    return word in ("free", "gone")': "SlotState.FREE",
        'def colour(i):\n    return "worse"': "Decision.WORSE",
    }
    passed = [
        'def colour(i):\n    return "worse"  # own word: a CSS class',
        'def counts(h):\n    return {"queued": 1, "running": 2, "epoch": 3}',        # a payload's field names
        'def pick(name):\n    return name == "exploit"',                              # an origin: keyed positions only
    ]
    dirs = ("daemon/engine", "daemon/views", "policies")
    for d in (*dirs, "daemon/store"):
        (tmp_path / d).mkdir(parents=True)
        for k, src in enumerate(anywhere):
            (tmp_path / d / f"a{k}.py").write_text(src + "\n")
        for k, src in enumerate(passed):
            (tmp_path / d / f"p{k}.py").write_text(src + "\n")
    found = scan(tmp_path)
    for d in dirs:
        for k, (src, member) in enumerate(anywhere.items()):
            assert any(f.startswith(f"{d}/a{k}.py:") and member in f for f in found), (d, src, found)
    assert not [f for f in found if f.startswith("daemon/store/") or "/p" in f.split(":")[0]], found


# -- the vocabulary table in docs/notes.md --------------------------------------------------------
def test_docs_list_every_member_of_each_enum():
    """docs/notes.md, "The vocabulary": one table per enum, whose rows are exactly its values."""
    doc = (ROOT / "docs" / "notes.md").read_text()
    section = doc.split("## The vocabulary (daemon/vocab.py)", 1)[1].split("\n## ", 1)[0]
    for enum in ENUMS:
        part = section.split(f"### `{enum.__name__}`", 1)
        assert len(part) == 2, f"docs/notes.md has no table for {enum.__name__}"
        table = part[1].split("\n### ", 1)[0]
        rows = re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", table, re.M)
        assert [v for v, _ in rows] == [m.value for m in enum], enum.__name__
        assert all(meaning.strip() for _, meaning in rows)


# -- the note text: the same bytes as before the enums ----------------------------------------------
# written by the daemon before the enums (main at 9e6ff75, the same Note): the text may not move
GOLDEN_NOTE = (
    'succeeded val_loss=3.2400 (-0.0150 vs baseline mean) [promoted]\n\nschema: 1\nstatus: succeeded\n'
    'idea_id: e001-abcdef12\norigin: exploit\nepoch: 1\nmetric: val_loss\ngoal: min\nvalue: 3.24\nseeds: [0,1]\n'
    'values: [3.24]\nbaseline: 3.255\ndelta: -0.015\ndecision: promoted\ntrials: [{"faults":[],"gpus":0,'
    '"host":"gpu03","metrics":{},"run_metrics":{},"seed":0,"status":"succeeded","tamper":[],'
    '"trial_id":"e001-ab-s0","value":3.24,"wall_s":60.0},{"error":"timed out","faults":[],"gpus":0,'
    '"host":"gpu03","metrics":{},"run_metrics":{},"seed":1,"status":"timed_out","tamper":[],'
    '"trial_id":"e001-ab-s1","wall_s":600.0}]\nfinished_at: 1795375410.25\n')
GOLDEN_LEASE = (
    '{"attempt":null,"began":null,"error":null,"faults":[],"handle":{},"heartbeat":2.5,"host":"gpu03",'
    '"purpose":"confirm","result":null,"retries":0,"runner":"local","seed":1,"slot":"1","started":1.5,'
    '"state":"stale","trial_id":"e001-ab-s1","version":1}')


def _note(decision, origin):
    t = [Trial(trial_id="e001-ab-s0", seed=0, status=Status.SUCCEEDED, value=3.24, host="gpu03", wall_s=60.0),
         Trial(trial_id="e001-ab-s1", seed=1, status=Status.TIMED_OUT, host="gpu03", wall_s=600.0, error="timed out")]
    return Note(status=Status.SUCCEEDED, idea_id="e001-abcdef12", origin=origin, epoch=1, metric="val_loss",
                goal="min", value=3.24, seeds=[0, 1], values=[3.24], baseline=3.255, delta=-0.015,
                decision=decision, trials=t, finished_at=1795375410.25)


def _lease(purpose, state):
    return Lease(trial_id="e001-ab-s1", seed=1, runner="local", host="gpu03", slot="1", started=1.5, heartbeat=2.5,
                 purpose=purpose, state=state)


def test_note_and_lease_text_is_byte_identical_for_every_member():
    """Every decision and origin member writes the note the plain word wrote before the enums, and every
    lease state and purpose the same lease; each reads back as the member and writes the same text."""
    assert format_note(_note(Decision.PROMOTED, Origin.EXPLOIT)) == GOLDEN_NOTE
    assert format_note(_note("promoted", "exploit")) == GOLDEN_NOTE
    for d in Decision:
        for o in Origin:
            want = GOLDEN_NOTE.replace("[promoted]", f"[{d.value}]").replace(
                "decision: promoted", f"decision: {d.value}").replace("origin: exploit", f"origin: {o.value}")
            assert format_note(_note(d, o)) == want == format_note(_note(d.value, o.value))
            back = parse_note(want)
            assert back.decision is d and back.origin is o and format_note(back) == want
    for p in Purpose:
        for s in LeaseState:
            text = format_leases([_lease(p, s)])
            assert GOLDEN_LEASE.replace('"confirm"', f'"{p.value}"').replace('"stale"', f'"{s.value}"') in text
            back = parse_leases(text)[0]
            assert back.purpose is p and back.state is s and format_leases([back]) == text


def test_a_newer_daemons_word_is_read_and_kept_as_a_plain_str(tmp_path):
    """Tolerant reading: an unknown decision, origin, lease state or purpose (a newer daemon's) neither
    breaks the read nor is dropped: it stays a plain str and is written back as it was."""
    text = GOLDEN_NOTE.replace("promoted", "reconsidered").replace("origin: exploit", "origin: swarm")
    n = parse_note(text)
    assert n is not None and n.status is Status.SUCCEEDED
    assert type(n.decision) is str and n.decision == "reconsidered"
    assert type(n.origin) is str and n.origin == "swarm"
    assert format_note(n) == text
    lease = format_leases([_lease(Purpose.CONFIRM, LeaseState.STALE)]).replace('"stale"', '"hibernating"') \
        .replace('"confirm"', '"audit"')
    lz = parse_leases(lease)[0]
    assert (type(lz.state), lz.state, type(lz.purpose), lz.purpose) == (str, "hibernating", str, "audit")
    assert format_leases([lz]) == lease
    msg = format_message("t", "body", {"Idea-Id": "e001-1", "Origin": "swarm", "Epoch": 1})
    idea = idea_from_commit("c" * 40, "d" * 40, None, msg, None)
    assert type(idea.origin) is str and idea.origin == "swarm"
    idea = idea_from_commit("c" * 40, "d" * 40, None, msg.replace("swarm", "greedy"), None)
    assert idea.origin is Origin.GREEDY
    assert known(Decision, "worse") is Decision.WORSE and known(Decision, None) is None
    assert known(Decision, ["x"]) == ["x"]


def test_the_parse_cache_keeps_the_members(tmp_path):
    """A note's decision and origin, and an idea's origin, survive the on-disk parse cache (marshal
    holds plain data only) as the same members."""
    n = freeze_parsed(_note(Decision.CONFIRMED, Origin.TUNE))
    back = parsecache.note_from(marshal.loads(marshal.dumps(parsecache.note_plain(n))))
    assert back.decision is Decision.CONFIRMED and back.origin is Origin.TUNE and back == n
    msg = format_message("t", "body", {"Idea-Id": "e001-1", "Origin": "explore", "Epoch": 1})
    fields = dict(vars(idea_from_commit("c" * 40, "d" * 40, None, msg, None)))
    back = parsecache.idea_from(marshal.loads(marshal.dumps(parsecache.idea_plain(fields))))
    assert Idea(**back).origin is Origin.EXPLORE      # derived from the cached trailers (store/ideas.py)


# -- the web and JSON payloads: the same bytes with the enums as with the plain words ----------------
def _as_strings(pop):
    """The population as it was read before the enums: every decision, origin, lease state and purpose
    a plain str (statuses were enums already)."""

    def p(v):
        return v.value if isinstance(v, Enum) and not isinstance(v, Status) else v

    def note(n):
        return None if n is None else n.model_copy(update={"decision": p(n.decision), "origin": p(n.origin)})

    def leases(ls):
        return [lz.model_copy(update={"state": p(lz.state), "purpose": p(lz.purpose)}) for lz in ls]

    # an idea's origin is derived from its note or trailers (store/ideas.py), so it follows the note's
    ideas = [dataclasses.replace(i, note=note(i.note), leases=leases(i.leases)) for i in pop.ideas]
    return Population(ideas, pop.baseline_commit, note(pop.baseline_note), leases(pop.baseline_leases),
                      at_baseline=list(pop.at_baseline))


def payloads(cfg, research, pop, monkeypatch) -> str:
    """Every JSON payload a view builds from a population: the dashboard's /api (overview, ideas, each
    idea, the baseline, lineage, failures), `status --json`, `ideas --json`, `export`, the progress
    counts; one JSON text."""
    s = Snapshot(cfg, research, pop, "1", secrets=[])
    monkeypatch.setattr(export, "load", lambda cfg: (research, pop))
    out = {"overview": s.overview(), "ideas": s.ideas(limit=10_000), "failures": s.failures(),
           "lineage": s.lineage(depth=6, limit=10_000), "baseline": s.idea("baseline"),
           "each": [s.idea(i.idea_id) for i in pop.ideas],
           "by_origin": [s.ideas(origin=o.value) for o in Origin], "by_decision": [s.ideas(decision=d.value)
                                                                              for d in Decision],
           "summary": summary(cfg, research, pop), "leaderboard": leaderboard(cfg, research=research, pop=pop),
           "export": export.records(cfg), "progress": [epoch_counts(pop), running_trials(pop)]}
    return json.dumps(out, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def test_payloads_are_byte_identical_with_the_enums(tmp_path, monkeypatch):
    """The JSON every view sends (dashboard /api, status/ideas --json, export) is the same text whether
    the population holds the enum members (today) or the plain words (before the enums)."""
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)           # the running trials' elapsed times
    repo = build_population(tmp_path / "research", 60, seed=3)
    cfg = load_config(write_cfg(tmp_path, repo.path))
    research, pop = load(cfg)
    held = {type(v) for i in pop.ideas for v in (i.origin, i.note and i.note.decision) if v}
    assert {Origin, Decision} <= held, "the population read holds the members"
    lz = [lz for i in pop.ideas for lz in i.leases]
    assert lz and all(isinstance(x.state, LeaseState) and isinstance(x.purpose, Purpose) for x in lz)
    plain = _as_strings(pop)
    assert all(type(i.note.decision) is str for i in plain.ideas if i.note and i.note.decision)
    enums = payloads(cfg, research, pop, monkeypatch)
    words = payloads(cfg, research, plain, monkeypatch)
    assert enums == words
    for word in ('"origin":"exploit"', '"decision":"pending"', '"status":"queued"', '"origin":"baseline"'):
        assert word in enums


def test_daemon_json_holds_the_plain_host_and_slot_words(tmp_path):
    """The host and slot tables daemon.json publishes (engine/health.py, engine/slots.py) hold the
    members, and their JSON the plain words `status`, the progress line and the dashboard's slot table
    compare with; the readers count them the same either way."""
    from autoresearchd.config import Config, RunnerCfg
    from autoresearchd.engine.health import HostHealth
    from autoresearchd.engine.slots import SlotTable
    from autoresearchd.manifest import parse_manifest
    from autoresearchd.runners.local import LocalRunner
    from autoresearchd.vocab import HostState, SlotState
    from conftest import TOY_MANIFEST

    runner = LocalRunner(RunnerCfg(kind="local", slots=2, sandbox="none"), parse_manifest(TOY_MANIFEST), tmp_path)
    health = HostHealth()
    table = SlotTable(Config(), runner, health)
    table.occupy("local/0", "t1")
    runner.errors["gpu9"] = "connection refused"
    rows = table.table()
    assert [r["state"] for r in rows] == [SlotState.BUSY, SlotState.FREE]
    assert json.loads(json.dumps(rows))[0]["state"] == "busy"
    health.fault("local", "disk full")
    assert {r["state"] for r in table.table()} == {SlotState.DEGRADED}
    hosts = json.loads(json.dumps(table.hosts()))
    assert hosts["local"]["state"] == "degraded" and hosts["gpu9"] == {"state": "unreachable", "reason": "connection refused"}
    assert isinstance(table.hosts()["local"]["state"], HostState)
    health.recovered("local")
    assert health.usable("local") and table.hosts()["local"]["state"] == HostState.OK == "ok"
