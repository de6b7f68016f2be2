"""What `status`, `show` and the notes print, each item as a user met it: float noise in notes,
`attempts: None`, a one-seed promotion called "best confirmed", GPU-hours for a CPU env, titles read
as rich markup, and the software fingerprint missing the torch the trials use. `status` and `show`
run as real subprocesses against real git."""

from __future__ import annotations

import os
import subprocess
import sys

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.notes import Note, Status, Trial, format_note, parse_note
from autoresearchd.store.refs import IDEAS_PREFIX

from conftest import branch_idea, write_config


def cli(cfg, *args):
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), *args],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_notes_carry_no_float_noise():
    n = Note(status=Status.SUCCEEDED, metric="val_loss", value=3.1450319999999996, values=[3.1450319999999996, 0.1 + 0.2],
             std=0.30000000000000004, gpu_s=12.000000000000002,
             trials=[Trial(trial_id="t", seed=0, status=Status.SUCCEEDED, value=0.1 + 0.2)])
    text = format_note(n)
    assert "3.1450319999999996" not in text and "0.30000000000000004" not in text and "12.000000000000002" not in text
    assert "value: 3.145032\n" in text and "values: [3.145032,0.3]" in text and '"value":0.3' in text
    back = parse_note(text)
    assert back.value == 3.145032 and back.values == [3.145032, 0.3] and back.trials[0].value == 0.3


def test_durations_are_kept_to_the_millisecond():
    # a clock reading like 953.032406569 s has no meaning past the millisecond
    n = Note(status=Status.SUCCEEDED, metric="val_loss", value=3.1, wall_s=953.032406569, cpu_s=953.032406569,
             trials=[Trial(trial_id="t", seed=0, status=Status.SUCCEEDED, value=3.1, wall_s=61.123456789)])
    text = format_note(n)
    assert "wall_s: 953.032\n" in text and "cpu_s: 953.032\n" in text and '"wall_s":61.123' in text
    assert parse_note(text).trials[0].wall_s == 61.123


def _measured(repo_path, idea_title, seeds_values, decision, baseline=(1.0, 1.01)):
    """A baseline note and one idea branch with a note, written as the daemon writes them."""
    sha = branch_idea(repo_path, "h/one", f"{idea_title}\n\nModel: some-model\n", {"run.py": "print(2)\n"})
    repo = GitRepo(repo_path)
    repo.update_ref(IDEAS_PREFIX + "one", sha)       # the daemon's mark: its trailers (Model) are believed
    led = Ledger(repo)
    base = repo.rev_parse("refs/heads/main")
    led.write_note(base, Note(status=Status.SUCCEEDED, metric="score", value=sum(baseline) / 2,
                              values=list(baseline), std=0.007, seeds=[0, 1], gpu_s=50.0))
    vals = list(seeds_values)
    led.write_note(sha, Note(status=Status.SUCCEEDED, metric="score", value=sum(vals) / len(vals), values=vals,
                             seeds=list(range(len(vals))), std=0.001 if len(vals) > 1 else None,
                             baseline=1.005, delta=sum(vals) / len(vals) - 1.005, decision=decision, gpu_s=40.0))
    return sha


def test_status_does_not_call_one_seed_confirmed_and_a_cpu_env_has_no_gpu_hours(toy_env, tmp_path):
    _measured(toy_env, "Lower x [red]now[/red]", [0.7], "promoted")
    cfg = write_config(tmp_path, toy_env)
    out = cli(cfg, "status")
    assert "best confirmed" not in out, out
    assert "best so far (promoted on 1 seed, not confirmed by fresh seeds)" in out and "(1 seed)" in out
    assert "“Lower x [red]now[/red]”" in out                 # the title as typed, not as markup
    assert "GPU-hours" not in out and "0.03 CPU-hours" in out  # gpus = 0: (50 + 40) s of CPU time


def test_status_says_confirmed_for_several_seeds(toy_env, tmp_path):
    _measured(toy_env, "Lower x", [0.7, 0.702], "confirmed")
    out = cli(write_config(tmp_path, toy_env), "status")
    assert "best confirmed: score = 0.7010 ± 0.0010 over 2 seeds" in " ".join(out.split()), out


def test_show_prints_only_known_facts(toy_env, tmp_path):
    sha = _measured(toy_env, "Pushed with a model trailer", [0.7], "promoted")
    out = cli(write_config(tmp_path, toy_env), "show", sha[:10])
    assert "model: some-model" in out and "attempts: None" not in out and "attempts" not in out.split("\n\n")[0]


def test_show_baseline_prints_its_note(toy_env, tmp_path):
    _measured(toy_env, "Any idea", [0.7], "promoted")      # writes the baseline's note too
    out = cli(write_config(tmp_path, toy_env), "show", "baseline")
    assert out.startswith("baseline  commit: ") and "status: succeeded" in out and "values: [1.0,1.01]" in out, out


def test_software_fingerprint_names_the_trials_python_and_torch(tmp_path):
    from autoresearchd.config import RunnerCfg
    from autoresearchd.manifest import EnvManifest
    from autoresearchd.runners.local import LocalRunner, LocalShell
    bin_dir = tmp_path / "venv-bin"
    bin_dir.mkdir()
    fake = bin_dir / "python"       # the interpreter trials find first on their PATH (say, a venv's)
    fake.write_text("#!/bin/sh\necho py3.11.99 torch9.8.7\n")
    fake.chmod(0o755)

    class VenvRunner(LocalRunner):
        def path_prefix(self, host):
            return f"{bin_dir}:/usr/bin:/bin"
    r = VenvRunner(RunnerCfg(), EnvManifest(run="true", metric="m"), tmp_path / "trials")
    probe = r._probe(LocalShell(), "local")
    assert "software: py3.11.99 torch9.8.7" in probe, probe
