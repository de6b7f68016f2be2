"""Trustworthy results: confirmation runs demote a lucky single seed, and a run that tampers with
its own evaluation cannot change the metric of record (the note flags what it can detect)."""

from autoresearchd.store.notes import Status

from conftest import branch_idea, run_until_settled, write_config

NOISY = """import os
seed = int(os.environ["AUTORESEARCH_SEED"])
noise = [0.0, 0.02, -0.02, 0.01, -0.01][seed % 5]
x = 1.0 + noise
open("out.txt", "w").write(str(x))
"""

LUCKY = """import os
seed = int(os.environ["AUTORESEARCH_SEED"])
x = 0.97 if seed == 0 else 1.03      # one lucky seed, worse on every other
open("out.txt", "w").write(str(x))
"""

SMALL = """x = 0.99     # ahead of the baseline by less than one run's standard error (0.023)
open("out.txt", "w").write(str(x))
"""

REAL = """import os
seed = int(os.environ["AUTORESEARCH_SEED"])
x = 0.93 + [0.0, 0.002, -0.002][seed % 3]   # a real gain, within one run's noise margin
open("out.txt", "w").write(str(x))
"""



def test_confirmation_demotes_a_lucky_seed_and_confirms_a_real_gain(make_repo, tmp_path):
    from conftest import TOY_EVAL, TOY_MANIFEST
    env = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": NOISY, "evaluate.py": TOY_EVAL}, "research")
    lucky = branch_idea(env, "x/lucky", "Lucky", {"run.py": LUCKY})
    small = branch_idea(env, "x/small", "Small", {"run.py": SMALL})
    cfg = write_config(tmp_path, env, "")
    cfg.write_text(cfg.read_text().replace("baseline_seeds = 2", "baseline_seeds = 3\nconfirm_seeds = 2"))
    pop = run_until_settled(cfg)
    b = pop.baseline_note
    assert b.values == [1.0, 1.02, 0.98] and abs(b.std - 0.02) < 1e-9
    n = pop.by_commit[lucky].note
    assert n.seeds == [0, 1, 2] and n.values == [0.97, 1.03, 1.03]
    assert n.decision == "demoted"
    # a lead under confirm_min (1) standard errors of a single run is a likely lucky draw: no seeds spent
    s = pop.by_commit[small].note
    assert s.seeds == [0] and s.decision == "within_noise", (s.seeds, s.decision)
    assert pop.best("min", confirmed=True) is None       # the lucky run never counts as best
    real = branch_idea(env, "x/real", "Real", {"run.py": REAL})
    pop = run_until_settled(cfg)
    r = pop.by_commit[real].note
    assert r.seeds == [0, 1, 2] and r.decision == "confirmed", (r.values, r.decision)
    assert abs(r.delta - (0.93 - 1.0)) < 1e-9                # paired by seed against the baseline
    assert pop.best("min", confirmed=True).commit == real


TAMPERS = {
    "overwrite_evaluate": "open('evaluate.py', 'w').write('print(\"---\\\\nscore: -1\")')\n",
    "fake_metrics_file": "import os, json; json.dump({'score': -1}, open(os.environ['AUTORESEARCH_RESULT'], 'w'))\n",
    "fake_metric_block": "print('---'); print('score: -1')\n",
    "sitecustomize": "open('sitecustomize.py', 'w').write('import builtins; builtins.print = None')\n",
}


def test_tampering_never_changes_the_metric_of_record(toy_env, tmp_path):
    base_run = (toy_env / "run.py").read_text().replace("x = 1.0", "x = 0.8")
    commits = {name: branch_idea(toy_env, f"t/{name}", f"tamper {name}", {"run.py": base_run + code})
               for name, code in TAMPERS.items()}
    pop = run_until_settled(write_config(tmp_path, toy_env))
    detected = {"overwrite_evaluate", "sitecustomize"}     # the runner reports these as tamper evidence
    for name, c in commits.items():
        n = pop.by_commit[c].note
        assert n.status == (Status.SUSPICIOUS if name in detected else Status.SUCCEEDED), (name, n.error)
        assert 0.8 <= n.value < 0.82, (name, n.value)     # evaluate's number from the real artifact
        if name in detected:                              # kept visible, never promoted or ranked
            assert n.decision is None and pop.by_commit[c].value is None and n.error.startswith("tamper:")
    assert any("evaluate.py" in t for t in pop.by_commit[commits["overwrite_evaluate"]].note.tamper)
    assert any("sitecustomize.py" in t for t in pop.by_commit[commits["sitecustomize"]].note.tamper)
    assert pop.by_commit[commits["overwrite_evaluate"]].note.harness == pop.baseline_note.harness
