"""The note schema round-trips exactly, parses tolerantly, and shows in plain `git log`."""

from autoresearchd.research import configure
from autoresearchd.store import notes
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Lease, Note, Status, Trial, format_leases, format_note, parse_leases, parse_note
from autoresearchd.store.refs import NOTES_REF

from conftest import git


def full_note() -> Note:
    t = Trial(trial_id="e001-ab-s0", seed=0, status=Status.SUCCEEDED, value=3.2412, metrics={"val_loss": 3.2412},
              exit_code=0, host="gpu03", wall_s=1453.2, gpus=8, log="a" * 40, tamper=["> x"], harness="h1",
              accelerator="8 x H100", software="py3.11 torch2.4")
    return Note(status=Status.SUCCEEDED, idea_id="e001-abcdef12", metric="val_loss", goal="min", value=3.2412,
                std=0.0021, seeds=[0, 1], values=[3.2412, 3.2431], baseline=3.255, baseline_std=0.003,
                delta=-0.0138, parent_delta=0.001, decision="promoted", host="gpu03", wall_s=1453.2, gpu_s=11625.6,
                exit_code=0, seed=0, error="line one\nline two: with colon", log="b" * 40, duplicate_of="e000-1",
                linked="c" * 40, accelerator="8 x H100", software="py3.11", harness="h1", tamper=["> evaluate.py"],
                tokens=1234, cost_usd=0.0123, cost={"ideation": 0.002, "implementation": 0.0103}, trials=[t],
                finished_at=1795375410.25)


def test_every_field_round_trips():
    n = full_note()
    text = format_note(n)
    back = parse_note(text)
    assert back == n
    assert format_note(back) == text


def test_summary_line():
    first = format_note(full_note()).splitlines()[0]
    assert first.startswith("succeeded val_loss=3.2412±0.0021 (-0.0138 vs baseline mean) [promoted] gpu03 24m13s")


def test_tolerant_parsing_skips_unknown_and_garbage():
    text = format_note(Note(status=Status.FAILED, error="boom")) + "future_key: 42\nnot a field line\n: x\n"
    n = parse_note(text)
    assert n.status == Status.FAILED and n.error == "boom"
    assert n.model_extra.get("future_key") == "42"
    assert parse_note("just prose\n\nno status here\n") is None
    # a newer schema with a wrong-typed known field still yields what we understand
    assert parse_note("x\n\nstatus: failed\nvalue: not-a-number\n").status == Status.FAILED


def test_the_schema_line_picks_the_reader(monkeypatch):
    """`schema` is read first and the note goes to that version's reader; a newer version than the
    daemon knows goes to its newest reader, a note without the line to version 1's."""
    text = format_note(Note(status=Status.SUCCEEDED, value=1.5))
    assert text.splitlines()[2] == "schema: 1" and parse_note(text).schema_ == 1
    seen = []

    def v2(fields):
        seen.append(fields["schema"])
        return notes.NOTE_READERS[1](fields)
    monkeypatch.setitem(notes.NOTE_READERS, 2, v2)
    assert parse_note(text.replace("schema: 1", "schema: 2")).value == 1.5 and seen == ["2"]
    assert parse_note(text.replace("schema: 1", "schema: 7")).value == 1.5 and seen == ["2", "7"]
    monkeypatch.delitem(notes.NOTE_READERS, 2)
    no_line = "\n".join(ln for ln in text.splitlines() if not ln.startswith("schema:")) + "\n"
    assert notes.note_schema({}) == 1 and parse_note(no_line).value == 1.5
    assert parse_note(text.replace("schema: 1", "schema: two")).value == 1.5      # unreadable: version 1


def test_leases_round_trip():
    leases = [Lease(trial_id="t1", seed=0, runner="ssh", host="h1", slot="0,1", handle={"dir": "/x", "pid": 4}),
              Lease(trial_id="t2", seed=1, runner="ssh", host="h2", slot="0", state="done",
                    result=Trial(trial_id="t2", seed=1, status=Status.FAILED, error="x"))]
    assert parse_leases(format_leases(leases)) == leases


def test_plain_git_log_shows_the_summary(make_repo):
    d = make_repo({"a.txt": "x"})
    repo = GitRepo(d)
    configure(repo)
    head = repo.rev_parse("HEAD")
    repo.note_write(NOTES_REF, head, format_note(full_note()))
    out = git(d, "log", "-1")
    assert "Notes (autoresearch):" in out
    assert "succeeded val_loss=3.2412" in out
    assert "succeeded val_loss=3.2412" in git(d, "log", "--notes", "-1")


def _fields_by_loads(text: str) -> dict:
    """What a note's `key: value` lines decode to, as json.loads reads each value: the reference the
    parser's faster decoding (json's scanner called directly, store/notes.py) must agree with."""
    import json
    out = {}
    for line in text.splitlines()[1:]:
        key, sep, raw = line.partition(": ")
        if not sep or not key or " " in key:
            continue
        raw = raw.strip()
        try:
            jsonish = key in notes._JSON_KEYS or raw.startswith(("{", "[", '"'))
            out[key] = json.loads(raw) if jsonish else raw
        except json.JSONDecodeError:
            out[key] = raw
    return out


# Every kind of value a note line may hold: JSON a list/dict field holds, JSON where a scalar field
# holds text, and text that only looks like JSON (two values, trailing text, an unclosed one, a JSON
# constant, whitespace json.loads skips and whitespace it does not, control and format characters)
VALUES = ['[0, 1]', '{"a": 1}', '[]', '{}', '"quoted"', '"\\u001b[31m"', '[1] x', '[1][2]', '[1', '{"a": 1',
          '"open', '"a" "b"', 'NaN', '-Infinity', 'null', 'true', '3.25', '1e400', '1,2', '', '  [3]  ',
          '[3]\u00a0', '\u2003[4]', '["\\ud800"]', '[1, 2,]', '{"a": NaN}', 'x', '"', '[', '{']


def test_note_values_decode_as_json_loads_reads_them():
    keys = ["seeds", "trials", "budget", "tune", "error", "value", "future_key", "status"]
    for key in keys:
        for v in VALUES:
            text = f"summary\n\n{key}: {v}\nstatus: failed\n"
            got = notes._note_fields(text)
            want = _fields_by_loads(text)
            assert repr(got) == repr(want), (key, v, got, want)      # repr: NaN == NaN, 1 != True
