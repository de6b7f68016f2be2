"""`doctor` and `start` validate through one path: every config `start` refuses, `doctor` flags with
the same message, and `start` refuses it before creating anything. Each doctor check (missing files,
frozen globs that match nothing, a setup path that does not exist, GPUs requested where none exist,
an unpriced model with a budget, a missing replay file) has its case here; `doctor --run` runs the
baseline for real on the local runner. Also the CLI basics: --version, help text, no arguments."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from autoresearchd.cli import main, parser
from autoresearchd.config import load_config

from conftest import TOY_MANIFEST, TOY_RUN, TOY_EVAL, git


def cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "autoresearchd.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=env)


def run_main(capsys, *args) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, " ".join(out.split()), " ".join(err.split())


def test_version_help_and_no_arguments():
    v = cli("--version")
    assert v.returncode == 0 and v.stdout.startswith("autoresearchd ") and len(v.stdout.split()) == 2
    bare = cli()
    assert bare.returncode == 0 and "usage: autoresearchd" in bare.stdout and "doctor" in bare.stdout
    p = parser()
    subs = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    missing = [(name, a.dest) for name, sp in [("", p), *subs.choices.items()] for a in sp._actions
               if not isinstance(a, argparse._HelpAction) and not a.help]
    assert not missing, f"options without help text: {missing}"
    assert all(c.help for c in subs._choices_actions), "a command without help text"


def _cfg(tmp_path, body: str):
    p = tmp_path / "c.toml"
    p.write_text(body)
    return str(p)


REFUSED = {
    "policy": ('[research]\nrepo = "R"\nenv = "tinygpt"\n[policy]\nname = "evolutionry"\n',
               "policy.name: unknown name 'evolutionry'; valid: best_of_n, evolutionary, greedy"),
    "kubernetes": ('[research]\nrepo = "R"\nenv = "tinygpt"\n[runner]\nkind = "kubernetes"\n',
                   "runner.kind: unknown name 'kubernetes'; valid: local, slurm, ssh"),
    "env-path": ('[research]\nrepo = "R"\nenv = "./env"\n',
                 "research.env: the env template ENV does not exist"),
    "ssh-no-hosts": ('[research]\nrepo = "R"\nenv = "tinygpt"\n[runner]\nkind = "ssh"\n',
                     "runner.kind = 'ssh' needs at least one [[runner.hosts]] entry"),
    "gpu-env-local-cpu": ('[research]\nrepo = "R"\nenv = "grpo"\n[llm]\nprovider = "none"\n',
                          "the env needs 1 GPU(s) per run, but runner.gpus lists 0"),
    "gpu-env-ssh-host": ('[research]\nrepo = "R"\nenv = "grpo"\n[llm]\nprovider = "none"\n[runner]\nkind = "ssh"\n'
                         '[[runner.hosts]]\nname = "cpu01"\nhost = "127.0.0.1"\ngpus = 0\n',
                         "the env needs 1 GPU(s) per run; host(s) cpu01 declare fewer"),
    "gpu-ids-beyond-machine": ('[research]\nrepo = "R"\nenv = "grpo"\n[llm]\nprovider = "none"\n[runner]\n'
                               'gpus = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\n',
                               "runner.gpus = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], but this "
                               "machine has"),
    "ssh-alias-without-config": ('[research]\nrepo = "R"\nenv = "tinygpt"\n[runner]\nkind = "ssh"\n'
                                 '[[runner.hosts]]\nname = "gpu01"\nalias = "gpu01"\n',
                                 "runner: host gpu01: alias 'gpu01' needs an ssh config file, but "
                                 "DIR/no-ssh-config does not exist"),
    "replay-file": ('[research]\nrepo = "R"\nenv = "tinygpt"\n[llm]\nprovider = "replay"\n'
                    'replay_file = "nope.jsonl"\n', "llm.replay_file: DIR/nope.jsonl does not exist"),
    "unpriced": ('[research]\nrepo = "R"\nenv = "tinygpt"\n[llm]\nprovider = "openai"\n'
                 'base_url = "http://127.0.0.1:9/v1"\nmodel = "my-model"\nbudget_usd = 5\n',
                 "model 'my-model' has no price in the llm.prices table while llm.budget_usd is set"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_doctor_flags_what_start_refuses_and_start_creates_nothing(case, tmp_path, capsys, monkeypatch):
    body, message = REFUSED[case]
    cfg = _cfg(tmp_path, body.replace('"R"', f'"{tmp_path / "research"}"'))
    message = message.replace("ENV", str(tmp_path / "env")).replace("DIR", str(tmp_path))
    for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AUTORESEARCHD_SSH_CONFIG", str(tmp_path / "no-ssh-config"))
    rc, out, _ = run_main(capsys, "--config", cfg, "doctor")
    assert rc == 1 and f"FAIL {message}" in out, out
    rc, _, err = run_main(capsys, "--config", cfg, "start")
    assert rc == 2 and err.startswith(f"autoresearchd: {message}"), err
    assert not (tmp_path / "research").exists(), "start created the research repo for a config it refuses"
    if case == "unpriced":
        assert "llm.prices" in out and "llm.prices" in err


def test_default_models_are_priced(tmp_path):
    cfg = load_config(_cfg(tmp_path, '[llm.prices."other"]\ninput = 1.0\noutput = 2.0\n'))
    for model in ("claude-sonnet-5-5", "gpt-5.5"):
        p = cfg.llm.prices[model]
        assert p.input > 0 and p.output > p.input
    assert cfg.llm.prices["other"].output == 2.0
    own = load_config(_cfg(tmp_path, '[llm.prices."gpt-5.5"]\ninput = 9.0\noutput = 9.5\n'))
    assert own.llm.prices["gpt-5.5"].input == 9.0          # a configured price wins over the shipped one


def _env(make_repo, manifest: str, run: str = TOY_RUN, evaluate: str = TOY_EVAL):
    return make_repo({".autoresearch.toml": manifest, "run.py": run, "evaluate.py": evaluate}, "research")


def test_doctor_manifest_checks(make_repo, tmp_path, capsys):
    manifest = (TOY_MANIFEST.replace('frozen = ["evaluate.py"]', 'frozen = ["evaluate.py", "evalute_*.py"]')
                .replace('run = "python3 run.py"', 'run = "python3 trian.py"')
                + 'setup = "source /nonexistent/venv/bin/activate"\n')
    repo = _env(make_repo, manifest)
    cfg = _cfg(tmp_path, f'[research]\nrepo = "{repo}"\n[llm]\nprovider = "none"\n')
    before = git(repo, "config", "--list", "--local")
    rc, out, _ = run_main(capsys, "--config", cfg, "doctor")
    assert rc == 1
    assert "FAIL env.run names trian.py, which is not in the baseline" in out, out
    assert "FAIL env.frozen: 'evalute_*.py' matches no file in the baseline" in out, out
    assert "FAIL env.setup names /nonexistent/venv/bin/activate, which does not exist on this host" in out, out
    assert "'evaluate.py'" not in out                      # the glob that matches is fine
    # doctor only reads: no hook, no git config written into the user's repo
    assert git(repo, "config", "--list", "--local") == before
    assert not (repo / ".git" / "hooks" / "reference-transaction").exists()
    rc, _, err = run_main(capsys, "--config", cfg, "start")
    assert rc == 2 and "env.run names trian.py" in err and "3 more problem" not in err


def test_doctor_run_prints_the_metric(toy_env, tmp_path, capsys):
    cfg = _cfg(tmp_path, f'[research]\nrepo = "{toy_env}"\n[llm]\nprovider = "none"\n')
    rc, out, _ = run_main(capsys, "--config", cfg, "doctor", "--run")
    assert rc == 0, out
    assert "ok baseline run + evaluate" in out and "score = 1.00" in out and "(read from evaluate)" in out, out
    assert "score = 123" not in out                     # run's own claim is not the metric of record
    assert " CPU seconds; an idea may use compute_cap x the baseline's)" in out, out   # the kernel's figure


def test_doctor_run_names_the_failing_step_and_its_log(make_repo, tmp_path, capsys):
    broken_eval = "import sys\nprint('loading the checkpoint')\nsys.exit('evaluate: no checkpoint at out.bin')\n"
    repo = _env(make_repo, TOY_MANIFEST.replace('context', 'check = "python3 -c pass"\ncontext', 1),
                evaluate=broken_eval)
    cfg = _cfg(tmp_path, f'[research]\nrepo = "{repo}"\n[llm]\nprovider = "none"\n')
    rc, out, _ = run_main(capsys, "--config", cfg, "doctor", "--run")
    assert rc == 1
    assert "ok check: `python3 -c pass` passed" in out, out
    assert "FAIL doctor --run: the evaluate step failed: exited with code 1" in out, out
    assert "evaluate: no checkpoint at out.bin" in out        # the log tail


def test_own_env_without_a_key_gets_one_llm_verdict(make_repo, tmp_path, capsys, monkeypatch):
    """An adopted repo, no API key, no replay file packaged for it: `auto` runs pushed branches only
    and doctor says so once (a warning naming the way to a live model), never a FAIL next to an ok;
    llm.provider = "replay" chosen outright without a file is one FAIL naming every way out."""
    for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(k, raising=False)
    repo = _env(make_repo, TOY_MANIFEST)
    cfg = _cfg(tmp_path, f'[research]\nrepo = "{repo}"\n')
    rc, out, _ = run_main(capsys, "--config", cfg, "doctor")
    assert rc == 0 and out.count("LLM provider") == 1 and "FAIL" not in out, out
    assert "warn LLM provider: none (no ANTHROPIC_API_KEY or OPENAI_API_KEY is set and env 'toy' has no recorded " \
           "ideas to replay: running the baseline and the idea branches you push" in out, out
    cfg = _cfg(tmp_path, f'[research]\nrepo = "{repo}"\n[llm]\nprovider = "replay"\n')
    rc, out, _ = run_main(capsys, "--config", cfg, "doctor")
    assert rc == 1 and out.count("LLM provider") == 0 and "has no packaged replay file" in out, out
    assert 'llm.provider = "none"' in out and "llm.replay_file" in out and "ANTHROPIC_API_KEY" in out, out
