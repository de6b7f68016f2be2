"""The whole search loop with a live-model stand-in: the real openai SDK against a local HTTP
server that proposes ideas and writes diffs. Steady state keeps slots busy, duplicates are
recorded (never implemented), the cost ledger adds up, and a restart mid-epoch neither repeats
nor skips ideas."""

import re

from autoresearchd.store.notes import Status

from conftest import TOY_RUN, run_until_settled, write_config
from fake_llm import FakeLLM, Reply

# Each proposal: (title, body). Epoch 0 has two batches of two; its second batch repeats an idea of
# the first (an in-batch-epoch duplicate) and proposes one that crashes; epoch 1 repeats the crash
# (a duplicate of a failed idea) and proposes a new one.
SCRIPT = [
    [("Lower x to 0.41", "Halving the output constant should reduce the evaluated score directly."),
     ("Lower x to 0.52", "A moderate reduction of the scalar tests whether smaller steps suffice.")],
    [("Lower x to 0.41", "Halving the output constant should reduce the evaluated score directly."),
     ("Crash on purpose", "Exit with code seven to exercise the failure path of the runner.")],
    [("Crash on purpose", "Exit with code seven to exercise the failure path of the runner."),
     ("Lower x to 0.33", "An aggressive cut of the constant probes the lower limit of the score.")],
]
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar".split()


def idea_block(title, body):
    return f"[Experiment] {title}\n{body}\n[Code Changes] Edit run.py.\n[End]\n"


def diff_for(title):
    m = re.search(r"x to ([0-9.]+)", title)
    new = f"x = {m.group(1)}" if m else "raise SystemExit(7)"
    return ("```diff\n--- a/run.py\n+++ b/run.py\n@@ -1,4 +1,4 @@\n import os, random\n"
            " random.seed(int(os.environ.get(\"AUTORESEARCH_SEED\", \"0\")))\n-x = 1.0\n"
            f"+{new}\n with open(\"out.txt\", \"w\") as f:\n```\n")


class Model:
    """Answers propose and implement requests like a (very predictable) model would."""

    def __init__(self):
        self.proposals = self.followups = 0

    def __call__(self, req):
        text = req.body["messages"][-1]["content"]
        if "Implement the research idea below" in text or "could not be used" in text:
            first = next(m["content"] for m in req.body["messages"] if m["role"] == "user")
            title = first.split("# The idea\n", 1)[1].splitlines()[0]
            return Reply(diff_for(title), 200, 100)
        if "more experiments, different from all the experiments above" in text:
            self.followups += 1
            k = 100 + self.followups          # replacements for dropped duplicates: always fresh
        else:
            k = self.proposals
            self.proposals += 1
        if k < len(SCRIPT):
            ideas = SCRIPT[k]
        else:  # fresh, distinct ideas from here on
            w = WORDS[k % len(WORDS)]
            ideas = [(f"Lower x to 0.{60 + k}{j}", f"{w} {WORDS[(k + 3 + j) % len(WORDS)]} variant number {k} {j} "
                      f"with its own {w}{j} wording") for j in range(2)]
        return Reply("".join(idea_block(t, b) for t, b in ideas), 300, 200)


def config(tmp_path, env, fake, extra=""):
    cfg = write_config(tmp_path, env, "")
    text = cfg.read_text().replace('[llm]\nprovider = "none"\n', "")
    text += (f'[llm]\nprovider = "openai"\nbase_url = "{fake.openai_url}"\nmodel = "m"\nbackoff_s = 0.01\n'
             f'[llm.prices.m]\ninput = 1.0\noutput = 2.0\n'
             f'[policy]\nname = "evolutionary"\nideas_per_epoch = 4\nbatch = 2\nqueue_buffer = 1\n'
             f'baseline_seeds = 2\nconfirm_seeds = 0\n[daemon]\nmax_epochs = 2\n{extra}')
    cfg.write_text(text.replace("[policy]\nbaseline_seeds = 2\n", "").replace("[daemon]\ntick_s = 0.3\n", "")
                   .replace("[daemon]\nmax_epochs", "[daemon]\ntick_s = 0.3\nmax_epochs"))
    return cfg


def test_search_loop_end_to_end(toy_env, tmp_path):
    fake = FakeLLM()
    model = Model()
    fake.script(*([model] * 200))
    try:
        pop = run_until_settled(config(tmp_path, toy_env, fake), timeout=180, with_llm=True)
    finally:
        fake.close()
    by_title = {}
    for i in pop.ideas:
        by_title.setdefault(i.title, []).append(i)
    # the in-batch duplicate was recorded, not implemented, and names the original
    dups = [i for i in pop.ideas if i.status == Status.DUPLICATE]
    assert dups and all(i.note.error for i in dups)
    assert len([i for i in by_title["Lower x to 0.41"] if i.branch]) == 1
    crash = [i for i in by_title["Crash on purpose"]]
    assert len([i for i in crash if i.branch]) == 1 and any(i.status == Status.DUPLICATE and i.epoch == 1
                                                           for i in crash)
    ran = [i for i in pop.ideas if i.note and i.note.status == Status.SUCCEEDED]
    assert {round(i.value, 1) for i in ran} >= {0.4, 0.5}
    crashed = [i for i in pop.ideas if i.note and i.note.status == Status.FAILED]
    assert crashed and "exited 7" in crashed[0].note.error
    # two epochs, whole batches, origins follow the schedule
    assert {i.epoch for i in pop.ideas if i.origin != "human"} == {0, 1}
    assert {i.origin for i in pop.ideas if i.epoch == 0 and i.status != Status.DUPLICATE} == {"seed"}
    # the ledger adds up: notes carry what the commit trailers say
    for i in ran + crashed:
        assert abs(i.note.cost_usd - i.cost_usd) < 1e-12
        assert abs(sum(i.note.cost.values()) - i.cost_usd) < 1e-9
    assert len({i.idea_id for i in pop.ideas}) == len(pop.ideas)


class FreshModel(Model):
    """Every proposal call gets new, distinct ideas (no duplicates), each taking a moment to run."""

    def __call__(self, req):
        text = req.body["messages"][-1]["content"]
        if "Implement the research idea below" in text or "could not be used" in text:
            return super().__call__(req)
        self.proposals += 1
        k = self.proposals
        ideas = [(f"Lower x to 0.{10 + 2 * k + j}", f"{WORDS[k % 15]} {WORDS[(k + 5 + j) % 15]} {k} {j} distinct")
                 for j in range(2)]
        return Reply("".join(idea_block(t, b) for t, b in ideas), 300, 200)


def test_restart_mid_epoch_neither_repeats_nor_skips_and_slots_stay_busy(toy_env, tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    slow = TOY_RUN.replace("x = 1.0", "import time; time.sleep(1.5)\nx = 1.0")
    (toy_env / "run.py").write_text(slow)
    from conftest import git
    git(toy_env, "commit", "-qam", "slower runs")
    fake = FakeLLM()
    fake.script(*([FreshModel()] * 300))
    cfg = config(tmp_path, toy_env, fake)
    state = toy_env / ".git" / "autoresearch" / "daemon.json"
    try:
        p = subprocess.Popen([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        busy_max, t0 = 0, time.time()
        while time.time() - t0 < 60:
            try:
                slots = json.loads(state.read_text())["slots"]
                busy_max = max(busy_max, sum(s["state"] == "busy" for s in slots))
            except (OSError, ValueError, KeyError):
                pass
            branches = git(toy_env, "for-each-ref", "refs/heads/idea/").splitlines()
            if len(branches) >= 3:
                break
            time.sleep(0.1)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        pop = run_until_settled(cfg, timeout=240, with_llm=True)
    finally:
        fake.close()
    real = [i for i in pop.ideas if i.status != Status.DUPLICATE]
    per_epoch = {e: len([i for i in real if i.epoch == e]) for e in (0, 1)}
    assert per_epoch == {0: 4, 1: 4}, per_epoch               # whole epochs: nothing repeated or skipped
    assert len({i.title for i in real}) == len(real)
    assert all(i.note is not None and i.note.status == Status.SUCCEEDED for i in real)
    assert busy_max == 2                                        # both slots were busy at once
