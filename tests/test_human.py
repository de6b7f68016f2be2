"""Human ideas: branches pushed from a clone (file://), force-pushes, bursts, and the watcher being
optional. Real git CLI, real daemon loop, local runner."""

import threading
import time

from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.engine.plan import settled
from autoresearchd.store.notes import Status
from autoresearchd.store.population import read_population

from conftest import git, run_until_settled, write_config


def clone(src, dst):
    git(dst.parent, "clone", "-q", f"file://{src}", str(dst))
    return dst


def push_idea(cl, name, message, edit):
    git(cl, "checkout", "-q", "-B", f"work-{name.replace('/', '-')}", "origin/main")
    edit(cl)
    git(cl, "commit", "-qam", message)
    git(cl, "push", "-q", "origin", f"HEAD:refs/heads/idea/{name}")
    return git(cl, "rev-parse", "HEAD").strip()


def set_x(value):
    def edit(cl):
        p = cl / "run.py"
        p.write_text(p.read_text().replace("x = 1.0", f"x = {value}"))
    return edit


def run_daemon(cfg, timeout=120, watcher=True):
    d = build_daemon(load_config(cfg), with_llm=False)
    if not watcher:
        # the name the loop calls (loop.py imports it): patching engine/watch.py's left the watcher on
        import autoresearchd.engine.loop as loop
        w_start, loop.start_watcher = loop.start_watcher, lambda repo, poke: None
    try:
        return run_until_settled(daemon=d, timeout=timeout, until=settled)
    finally:
        if not watcher:
            loop.start_watcher = w_start


def test_push_from_clone_runs_and_result_is_fetchable(toy_env, tmp_path):
    cfg = write_config(tmp_path, toy_env)
    cl = clone(toy_env, tmp_path / "clone")
    sha = push_idea(cl, "alice/half", "Halve x\n\nA person's idea, pushed.", set_x(0.5))
    pop = run_daemon(cfg)
    idea = pop.by_commit[sha]
    assert idea.origin == "human" and idea.title == "Halve x" and idea.text == "A person's idea, pushed."
    assert idea.note.status == Status.SUCCEEDED and idea.note.value < 0.52
    git(cl, "fetch", "-q", "origin", "refs/notes/*:refs/notes/*")
    out = git(cl, "log", "--notes=autoresearch", "-1", sha)
    assert "succeeded score=" in out


def test_force_push_queues_new_tip_old_result_stays(toy_env, tmp_path):
    cfg = write_config(tmp_path, toy_env)
    cl = clone(toy_env, tmp_path / "clone")
    old = push_idea(cl, "bob/x", "x 0.8", set_x(0.8))
    run_daemon(cfg)
    # a child built on the old commit names it as its parent
    git(cl, "checkout", "-q", "-b", "child", old)
    (cl / "run.py").write_text((cl / "run.py").read_text().replace("x = 0.8", "x = 0.7"))
    git(cl, "commit", "-qam", f"x 0.7 on top\n\nParents: h-{old[:10]}")
    git(cl, "push", "-q", "origin", "HEAD:refs/heads/idea/bob/child")
    git(cl, "checkout", "-q", "work-bob-x")
    git(cl, "commit", "-q", "--amend", "-m", "x 0.6 instead")
    (cl / "run.py").write_text((cl / "run.py").read_text().replace("x = 0.8", "x = 0.6"))
    git(cl, "commit", "-qam", "x 0.6")
    git(cl, "push", "-q", "-f", "origin", "HEAD:refs/heads/idea/bob/x")
    new = git(cl, "rev-parse", "HEAD").strip()
    pop = run_daemon(cfg)
    assert pop.by_commit[new].note.value < 0.62
    # the old commit is no longer on a branch, but its note is still there
    from autoresearchd.store.gitrepo import GitRepo
    from autoresearchd.store.notes import parse_note
    old_note = parse_note(GitRepo(toy_env).note_read("refs/notes/autoresearch", old))
    assert 0.8 <= old_note.value < 0.82
    # ... and the old commit itself stays reachable, with its result in every view
    assert git(toy_env, "rev-parse", f"refs/autoresearch/archive/{old}").strip() == old
    assert pop.by_commit[old].note.value == old_note.value and pop.by_commit[old].idea_id == f"h-{old[:10]}"
    assert pop.by_commit[new].branch == "refs/heads/idea/bob/x"
    assert all(p in pop.by_id for i in pop.ideas for p in i.parents)          # no dangling parent ids
    assert any(i.parents == [f"h-{old[:10]}"] for i in pop.ideas)
    import io
    import json

    from rich.console import Console

    from autoresearchd.views.export import export
    from autoresearchd.views.observe import ideas_table, show
    c = load_config(cfg)
    out = io.StringIO()
    ideas_table(c, Console(file=out, width=300), as_json=True)
    rows = {r["commit"]: r for r in json.loads(out.getvalue())}
    assert rows[old]["value"] == old_note.value and rows[new]["value"] == pop.by_commit[new].note.value
    out = io.StringIO()
    assert show(c, Console(file=out, width=300), old[:10]) == 0
    assert "x = 0.8" in out.getvalue() or "succeeded" in out.getvalue()
    export(c, tmp_path / "t.jsonl")
    recs = {r["commit"]: r for r in map(json.loads, (tmp_path / "t.jsonl").read_text().splitlines())}
    assert recs[old]["result"] == old_note.value and "+x = 0.8" in (recs[old]["code_diff"] or "")
    # gc keeps it: nothing measured is dangling
    git(toy_env, "gc", "-q", "--prune=now")
    assert git(toy_env, "cat-file", "-t", old).strip() == "commit"


def test_invalid_push_is_rejected_on_arrival_not_at_the_front_of_the_queue(toy_env, tmp_path):
    """A frozen-file edit is rejected by the next tick even while every slot is busy with other work."""
    (toy_env / "run.py").write_text("import time\ntime.sleep(120)\n")
    git(toy_env, "commit", "-qam", "a long baseline")
    cfg = load_config(write_config(tmp_path, toy_env))
    cfg.runner.slots = 1
    d = build_daemon(cfg, with_llm=False)
    try:
        d.tick()                                    # the baseline's seed 0 takes the only slot
        assert any(lz.state == "running" for lz in d.tick().baseline_leases)
        cl = clone(toy_env, tmp_path / "clone")
        bad = push_idea(cl, "mallory/eval", "Better score", lambda c: (c / "evaluate.py").write_text("print(0)\n"))
        t0 = time.monotonic()
        pop = d.tick()
        assert time.monotonic() - t0 < 30
        note = pop.by_commit[bad].note
        assert note is not None and note.status == Status.REJECTED and "evaluate.py" in note.error
        assert any(lz.state == "running" for lz in pop.baseline_leases)   # the queue never reached it
    finally:
        for lz in read_population(d.repo, d.research.baseline_ref).baseline_leases:
            d.runner.cancel(lz.handle)
        d.runner.close()


def test_burst_of_50_pushes_without_watcher(toy_env, tmp_path):
    cfg = write_config(tmp_path, toy_env)
    cl = clone(toy_env, tmp_path / "clone")
    shas = set()
    for k in range(50):
        shas.add(push_idea(cl, f"burst/i{k:02d}", f"burst idea {k}", set_x(round(0.5 + k / 100, 2))))
    pop = run_daemon(cfg, timeout=240, watcher=False)   # the clock alone finds every branch
    got = {i.commit for i in pop.ideas if i.note is not None and i.note.status == Status.SUCCEEDED}
    assert shas <= got


def test_watcher_pokes_the_loop(toy_env, tmp_path):
    """With a long tick, a pushed branch is still dispatched promptly: the watcher (or hook) pokes."""
    cfg = write_config(tmp_path, toy_env, "")
    text = cfg.read_text().replace("tick_s = 0.3", "tick_s = 8")
    cfg.write_text(text)
    d = build_daemon(load_config(cfg), with_llm=False)
    t = threading.Thread(target=d.run_forever, kwargs={"install_signals": False}, daemon=True)
    t.start()
    deadline = time.time() + 60
    while time.time() < deadline and read_population(d.repo, d.research.baseline_ref).baseline_note is None:
        time.sleep(0.2)
    cl = clone(toy_env, tmp_path / "clone")
    t0 = time.time()
    sha = push_idea(cl, "carol/fast", "fast", set_x(0.4))
    while time.time() - t0 < 20:
        pop = read_population(d.repo, d.research.baseline_ref)
        if sha in pop.by_commit and pop.by_commit[sha].status != Status.QUEUED:
            break
        time.sleep(0.05)
    latency = time.time() - t0
    d._stopped.set()
    t.join(30)
    assert latency < 4, f"dispatch took {latency:.1f}s with an 8s tick"


def test_a_branch_pushed_at_the_baseline_commit_is_the_baseline_not_an_idea(toy_env, tmp_path):
    """`git push origin main:idea/x` adds nothing to measure: the branch is no idea of its own (which
    would count the baseline's spend twice and list it at +0.0000), and both `ideas` and `show` say
    what it is."""
    cfg = write_config(tmp_path, toy_env)
    cl = clone(toy_env, tmp_path / "clone")
    git(cl, "push", "-q", "origin", "origin/main:refs/heads/idea/same")
    pop = run_daemon(cfg)
    assert pop.baseline_note is not None and pop.baseline_note.status == Status.SUCCEEDED
    assert pop.baseline_commit not in pop.by_commit and pop.at_baseline == ["refs/heads/idea/same"]
    from io import StringIO

    from rich.console import Console

    from autoresearchd.views.observe import ideas_table, show
    out = StringIO()
    assert ideas_table(load_config(cfg), Console(file=out, width=80)) == 0
    assert "idea/same: at the baseline commit" in out.getvalue() and "+0.0000" not in out.getvalue()
    out = StringIO()
    assert show(load_config(cfg), Console(file=out, width=80), "idea/same") == 0
    assert "points at the baseline commit" in out.getvalue() and pop.baseline_commit in out.getvalue()
