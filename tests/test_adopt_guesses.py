"""What `adopt` guesses on a repo shaped like karpathy/nanoGPT (written here: a README that documents
its commands, a config/ directory read by a configurator, data/<set>/prepare.py scripts, a train.py
that defaults to cuda), and what `doctor` says about what it could not guess:

- the run command comes from the README, the one whose files exist and that fits this host (the CPU
  one without a GPU), the others listed; `gpus` comes from the host, never from what train.py says;
- the prepare script the run's config names is the manifest's `prepare`, and the "next:" list says so;
- the hand-test command adopt prints runs as printed, with every variable the evaluator reads;
- with no API key, `doctor && start` as adopt prints them work on the adopted repo, with one verdict
  on the LLM;
- doctor says an uncommitted manifest is uncommitted, suggests env.gpus = 0 on a host without GPUs,
  and points at `prepare` when the run fails on a missing data file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from needs import not_here

from test_adopt import fill_in as adopt_fill_in

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status
from autoresearchd.store.population import read_population
from autoresearchd.validate import local_gpu_count

from conftest import git
from test_adopt import MODEL

pytest.importorskip("torch", reason="the nanoGPT-shaped repo trains with torch")
pytest.importorskip("numpy", reason="the nanoGPT-shaped repo keeps its tokens as numpy uint16")
if local_gpu_count():
    not_here("these tests check adopt's choices on a host without a CUDA device", module=True)

TRAIN = '''"""Train the small GPT on data/<dataset>/{train,val}.bin (uint16 tokens) and save out_dir/ckpt.pt."""
import os
import pickle
import sys

import numpy as np
import torch

from model import GPT, GPTConfig

out_dir = "out"
dataset = "openwebtext"
device = "cuda"
batch_size = 8
block_size = 32
max_iters = 2000
eval_interval = 10
learning_rate = 3e-3
n_layer = 1
for arg in sys.argv[1:]:        # the configurator: a config file sets globals, then --key=value overrides
    if not arg.startswith("--"):
        exec(open(arg).read())
    else:
        key, val = arg[2:].split("=", 1)
        globals()[key] = val if isinstance(globals()[key], str) else type(globals()[key])(val)
torch.manual_seed(1337)

data_dir = os.path.join("data", dataset)
train_data = np.fromfile(os.path.join(data_dir, "train.bin"), dtype=np.uint16).astype(np.int64)
val_data = np.fromfile(os.path.join(data_dir, "val.bin"), dtype=np.uint16).astype(np.int64)
with open(os.path.join(data_dir, "meta.pkl"), "rb") as f:
    vocab_size = pickle.load(f)["vocab_size"]


def get_batch(split):
    d = torch.from_numpy(train_data if split == "train" else val_data)
    ix = torch.randint(len(d) - block_size - 1, (batch_size,))
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


model_args = dict(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer, n_head=2, n_embd=32)
model = GPT(GPTConfig(**model_args)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
for it in range(max_iters + 1):
    if it % eval_interval == 0:
        with torch.no_grad():
            print(f"step {it}: val loss {model(*get_batch('val'))[1].item():.4f}")
    _, loss = model(*get_batch("train"))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
os.makedirs(out_dir, exist_ok=True)
torch.save({"model": model.state_dict(), "model_args": model_args}, os.path.join(out_dir, "ckpt.pt"))
'''

PREPARE = '''"""Make this data set's train.bin, val.bin (uint16 character ids) and meta.pkl next to this file."""
import os
import pickle
import random

import numpy as np

here = os.path.dirname(__file__)
r = random.Random(0)
words = "the cat sat on a mat and the dog ran to the park while birds sang in tall green trees".split()
text = "\\n".join(" ".join(r.choice(words) for _ in range(r.randint(4, 10))) for _ in range(400))
chars = sorted(set(text))
ids = np.array([chars.index(c) for c in text], dtype=np.uint16)
n = int(0.9 * len(ids))
ids[:n].tofile(os.path.join(here, "train.bin"))
ids[n:].tofile(os.path.join(here, "val.bin"))
with open(os.path.join(here, "meta.pkl"), "wb") as f:
    pickle.dump({"vocab_size": len(chars)}, f)
'''

README_FULL = """# tinynano

The simplest repo for training small GPTs.

## quick start

```sh
python data/shakespeare_char/prepare.py
python train.py config/train_shakespeare_char.py
```

Then sample from it with `python sample.py --out_dir=out`.

No GPU? Train on the CPU with a smaller run:

```sh
$ python train.py config/train_shakespeare_char.py --device=cpu --max_iters=20
```

## reproducing GPT-2

```sh
python data/openwebtext/prepare.py
torchrun --standalone --nproc_per_node=8 \\
    train.py config/train_gpt2.py
```

Evaluate the baselines with `python train.py config/eval_gpt2.py`, and finetune with
`python train.py config/finetune_big.py`.
"""

README_PLAIN = """# tinynano

```
python data/shakespeare_char/prepare.py
python train.py config/train_shakespeare_char.py
```
"""

CONFIGS = {
    "config/train_shakespeare_char.py": 'out_dir = "out"\ndataset = "shakespeare_char"\nmax_iters = 20\n',
    "config/train_gpt2.py": 'dataset = "openwebtext"\nbatch_size = 12\nn_layer = 12\n',
    "config/eval_gpt2.py": 'dataset = "openwebtext"\nmax_iters = 0\n',
}

EVAL_FILL = ('    import numpy as np\n'
             '    path = os.path.join(os.environ["AUTORESEARCH_PREPARED"], "data/shakespeare_char/val.bin")\n'
             '    return torch.from_numpy(np.fromfile(path, dtype=np.uint16).astype(np.int64))')


def files(readme: str) -> dict[str, str]:
    return {"README.md": readme, "model.py": MODEL, "train.py": TRAIN, **CONFIGS,
            "data/shakespeare_char/prepare.py": PREPARE, "data/shakespeare/prepare.py": PREPARE,
            "data/openwebtext/prepare.py": PREPARE.replace("os.path.dirname(__file__)", "'/nonexistent'"),
            ".gitignore": "*.bin\n*.pkl\nout/\n__pycache__/\n"}


def cli_env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**env, **extra}


def adopt_on_a_terminal(repo: Path, answers: list[tuple[bytes, bytes]]) -> tuple[int, str, list]:
    """`adopt` run on a pseudo-terminal: each (prompt, keys) pair sends its keys once the prompt is shown,
    in order. Returns the exit code, the text shown (colours removed) and the pairs never sent."""
    import pty
    import select
    import time
    answers = list(answers)
    pid, fd = pty.fork()
    if pid == 0:        # the child: adopt on the pty
        os.chdir(repo)
        os.execvpe(sys.executable, [sys.executable, "-m", "autoresearchd.cli", "adopt"], cli_env(COLUMNS="400"))
    out, deadline = b"", time.time() + 120
    while time.time() < deadline:
        if not select.select([fd], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:         # the child closed the pty
            break
        if not chunk:
            break
        out += chunk
        if answers and answers[0][0] in out:
            os.write(fd, answers.pop(0)[1])
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), re.sub(r"\x1b\[[0-9;]*m", "", out.decode(errors="replace")), answers


def cli(*args, cwd, timeout=300, **env):
    return subprocess.run([sys.executable, "-m", "autoresearchd.cli", *args], cwd=cwd, env=cli_env(**env),
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def fill_in(root: Path) -> None:
    """The user's part, as docs/bring-your-own-repo.md steps 2-4 say: the export, the evaluator
    reading prepare's val.bin from $AUTORESEARCH_PREPARED, the seed."""
    adopt_fill_in(root, EVAL_FILL)
    train = (root / "train.py").read_text().replace(
        "torch.manual_seed(1337)", 'torch.manual_seed(int(os.environ.get("AUTORESEARCH_SEED", 1337)))')
    (root / "train.py").write_text(train)


def manifest_value(text: str, key: str) -> str | None:
    m = re.search(rf"^{key} = (.*)$", text, re.M)
    return m.group(1) if m else None


def test_adopt_reads_the_readme_and_config_dir_for_the_run_gpus_and_prepare(make_repo):
    repo = make_repo(files(README_FULL), "tinynano")
    p = cli("adopt", cwd=repo)
    assert p.returncode == 0, p.stderr
    out, m = p.stdout, (repo / ".autoresearch.toml").read_text()
    # the README's CPU command: its config exists and this host has no GPU
    assert manifest_value(m, "run").endswith(
        'python train.py config/train_shakespeare_char.py --device=cpu --max_iters=20 && python autoresearch_export.py"'), m
    assert "run: python train.py config/train_shakespeare_char.py --device=cpu --max_iters=20   (documented at " \
           "README.md:17)" in out, out
    # the others are offered; the multi-GPU launch was joined across its continuation line
    for other in ("python train.py config/train_shakespeare_char.py   (README.md:9)",
                  "torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py   (README.md:24)",
                  "python train.py config/finetune_big.py   (README.md:29; missing: config/finetune_big.py)"):
        assert f"other training command: {other}" in out, out
        assert other in m
    assert "sample.py" not in out and "eval_gpt2" not in out        # sampling and evaluating do not train
    # gpus from the host: train.py mentions cuda, and this host has none
    assert manifest_value(m, "gpus").startswith("0 "), m
    assert "gpus = 0: no CUDA device is visible on this host (train.py mentions cuda" in out
    # the prepare script of the run's data set (the config names shakespeare_char), not commented out
    assert manifest_value(m, "prepare") == '"python data/shakespeare_char/prepare.py"', m
    assert manifest_value(m, "prepare_inputs") == '["data/shakespeare_char/prepare.py"]', m
    nxt = out.split("next:", 1)[1]
    assert "prepare: `python data/shakespeare_char/prepare.py` (documented at README.md:8)" in nxt, nxt


def test_the_printed_hand_test_runs_as_printed(make_repo):
    """The README names only the GPU command: adopt adds the CPU option it can tell the configurator
    takes, and the hand test it prints (prepare, run, evaluate with every trial variable) runs."""
    repo = make_repo(files(README_PLAIN), "plain")
    p = cli("adopt", cwd=repo)
    assert p.returncode == 0, p.stderr
    m = (repo / ".autoresearch.toml").read_text()
    assert "python train.py config/train_shakespeare_char.py --device=cpu && python autoresearch_export.py" in m, m
    assert "--device=cpu added: no GPU here" in p.stdout, p.stdout
    fill_in(repo)
    line = next(ln for ln in p.stdout.splitlines() if "try it by hand:" in ln)
    cmd = line.split("try it by hand: ", 1)[1].rsplit("   (it must end with", 1)[0]
    assert "AUTORESEARCH_PREPARED=" in cmd and "AUTORESEARCH_ARTIFACTS=" in cmd and "AUTORESEARCH_SEED=0" in cmd
    run = subprocess.run(["bash", "-c", cmd], cwd=repo, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (cmd, run.stdout[-2000:], run.stderr[-2000:])
    assert run.stdout.rstrip().splitlines()[-2:][0] == "---" and "val_loss: " in run.stdout.splitlines()[-1], run.stdout


def test_adopted_repo_without_a_key_doctor_then_start_as_printed(make_repo):
    """adopt's last hint, `autoresearchd doctor && autoresearchd start`, works with no API key: one
    verdict on the LLM (no replay file is packaged for this env: pushed branches only), and the
    baseline is measured (start stops when idle, as in the other tests)."""
    repo = make_repo(files(README_FULL), "nokey")
    p = cli("adopt", cwd=repo)
    assert p.returncode == 0, p.stderr
    assert "then: autoresearchd doctor && autoresearchd start" in p.stdout
    fill_in(repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "autoresearchd environment")
    d = cli("doctor", cwd=repo)
    out = " ".join(d.stdout.split())
    assert d.returncode == 0, out
    assert "FAIL" not in out and len(re.findall(r"LLM provider:", out)) == 1, out
    assert "warn LLM provider: none (no ANTHROPIC_API_KEY or OPENAI_API_KEY is set and env 'nokey' has no " \
           "recorded ideas to replay: running the baseline and the idea branches you push" in out, out
    s = cli("start", "--until", "idle", cwd=repo, timeout=540, AUTORESEARCHD_POLICY__BASELINE_SEEDS="2",
            AUTORESEARCHD_RUNNER__SLOTS="2", AUTORESEARCHD_DAEMON__TICK_S="0.5")
    log = s.stdout + s.stderr
    assert s.returncode == 0, log[-3000:]
    b = read_population(GitRepo(repo), "refs/heads/main").baseline_note
    assert b is not None and b.status == Status.SUCCEEDED and b.seeds == [0, 1], (b, log[-3000:])
    assert 0.5 < b.value < 5.0 and not any("identical" in f for f in b.flags)


def test_doctor_says_the_manifest_is_not_committed(make_repo):
    repo = make_repo(files(README_FULL), "uncommitted")
    assert cli("adopt", cwd=repo).returncode == 0
    d = cli("doctor", cwd=repo)
    out = " ".join(d.stdout.split())
    assert d.returncode == 1
    assert f"{repo / '.autoresearch.toml'} exists in the work tree but is not committed on 'main'" in out, out
    assert (f"git -C {repo} add .autoresearch.toml autoresearch_eval.py autoresearch_export.py .gitignore && "
            f"git -C {repo} commit -m 'autoresearchd environment'") in out, out
    assert "no .autoresearch.toml with an [env] table" not in out
    s = cli("start", cwd=repo)
    assert s.returncode == 2 and "exists in the work tree but is not committed" in s.stderr, s.stderr


def test_doctor_suggests_cpu_gpus_and_prepare(make_repo):
    """A manifest that asks for a GPU on this GPU-less host: doctor names env.gpus = 0. A run that
    fails on a data file only prepare makes: doctor --run points at prepare."""
    repo = make_repo(files(README_FULL), "hints")
    assert cli("adopt", cwd=repo).returncode == 0
    fill_in(repo)
    m = (repo / ".autoresearch.toml").read_text()
    (repo / ".autoresearch.toml").write_text(re.sub(r"^gpus = .*$", "gpus = 1", m, flags=re.M))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "asks for a GPU")
    out = " ".join(cli("doctor", cwd=repo).stdout.split())
    assert "FAIL the env needs 1 GPU(s) per run, but runner.gpus lists 0 (this machine has 0) — this machine " \
           "has no GPU: if the run trains on the CPU, set gpus = 0 in the manifest's [env] (env.gpus = 0; now 1)" in out, out
    no_prep = "\n".join(ln for ln in m.splitlines() if not ln.startswith(("prepare", "gpus")))
    no_prep = no_prep.replace('for f in "$AUTORESEARCH_PREPARED"/data/shakespeare_char/*; do '
                              '[ -e data/shakespeare_char/"${f##*/}" ] || ln -s "$f" data/shakespeare_char/; done && ', "")
    assert "AUTORESEARCH_PREPARED\"/" not in no_prep.split("context")[0]
    (repo / ".autoresearch.toml").write_text(no_prep.replace("[env]\n", "[env]\ngpus = 0\n"))
    git(repo, "commit", "-qam", "no prepare")
    d = cli("doctor", "--run", "--budget-s", "120", cwd=repo)
    out = " ".join(d.stdout.split())
    assert d.returncode == 1 and "FAIL doctor --run: the run step failed: exited with code 1" in out, out
    assert "No such file or directory" in out or "FileNotFoundError" in out, out
    assert "a file is missing: data that is not committed must be made by `prepare`" in out, out
    assert 'env.prepare = "python data/shakespeare_char/prepare.py" (the baseline has data/openwebtext/prepare.py, ' \
           'data/shakespeare/prepare.py, data/shakespeare_char/prepare.py)' in out, out


def test_adopt_asks_which_command_on_a_terminal(make_repo):
    """On a terminal adopt lists the training commands and asks; the answer becomes `run` (the CPU
    option still added), and its commit question is asked too. Without a terminal it never asks (the
    tests above run with stdin from /dev/null)."""
    repo = make_repo(files(README_FULL), "tty")
    head = git(repo, "rev-parse", "HEAD").strip()
    code, text, answers = adopt_on_a_terminal(repo, [(b"use which for `run`? [1-4", b"2\n"),
                                                     (b"now, as they are? [y/N]", b"n\n")])
    assert code == 0 and not answers, text
    assert "2. python train.py config/train_shakespeare_char.py   (README.md:9)" in text, text
    m = (repo / ".autoresearch.toml").read_text()
    assert manifest_value(m, "run").endswith(
        'python train.py config/train_shakespeare_char.py --device=cpu && python autoresearch_export.py"'), m
    assert "other training command (edit `run` to use it): python train.py config/train_shakespeare_char.py " \
           "--device=cpu --max_iters=20" in m
    assert git(repo, "rev-parse", "HEAD").strip() == head        # answered no: nothing committed


CHARLM = '''"""A character-level model of the lines of a text file, trained until --max-steps (forever by default)."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--input-file", "-i", type=str, default="words.txt")
parser.add_argument("--work-dir", "-o", type=str, default="out")
parser.add_argument("--max-steps", type=int, default=-1, help="-1 for infinite")
parser.add_argument("--seed", type=int, default=3407)
args = parser.parse_args()
torch.manual_seed(args.seed)
step = 0
while args.max_steps < 0 or step < args.max_steps:
    step += 1
print(f"step {step} test loss: 1.0")
'''


def test_adopt_on_an_argparse_script_on_master(make_repo):
    """A makemore-shaped repo: one script that is not called train*, a README command naming its data
    file, argparse options for the seed and an endless default length, the branch `master`. adopt
    passes the trial's seed through --seed, says the run may never end, freezes the data file the run
    reads and makes `master` the baseline, so doctor reads the committed manifest from it."""
    repo = make_repo({"charlm.py": CHARLM, "words.txt": "ada\nbob\ncy\n" * 50,
                      "README.md": "# charlm\n\n```bash\n$ python charlm.py -i words.txt -o words\n"
                                   "$ python charlm.py -i words.txt -o words --sample-only\n```\n"}, "charlm")
    git(repo, "branch", "-m", "main", "master")
    p = cli("adopt", "--commit", cwd=repo)
    assert p.returncode == 0, p.stderr
    out, m = p.stdout, (repo / ".autoresearch.toml").read_text()
    assert manifest_value(m, "run") == ('"python charlm.py -i words.txt -o words --seed \\"$AUTORESEARCH_SEED\\" '
                                        '&& python autoresearch_export.py"'), m
    assert 'seed: run passes --seed "$AUTORESEARCH_SEED" (charlm.py takes the option)' in out, out
    assert "not sure: charlm.py --max-steps (default -1): a run may train until time_budget_s kills it" in out, out
    assert manifest_value(m, "frozen").startswith('["autoresearch_eval.py", "autoresearch_model.py", "words.txt"]'), m
    assert manifest_value(m, "baseline").startswith('"master"'), m
    assert "--sample-only" not in manifest_value(m, "run")
    d = cli("doctor", cwd=repo)
    out = " ".join(d.stdout.split())
    assert d.returncode == 0 and "ok env 'charlm' from research repo" in out, out


def test_adopt_activates_the_python_on_path_when_it_is_not_its_own(make_repo, tmp_path):
    """The local runner puts autoresearchd's interpreter first on the trials' PATH. When `python` on
    the user's PATH is another venv (the one holding the repo's packages), adopt writes the setup that
    activates it, and the hand test runs each step after it, as a trial does."""
    venv = tmp_path / "ml"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    repo = make_repo({"charlm.py": CHARLM, "words.txt": "ada\nbob\n",
                      "README.md": "```\npython charlm.py -i words.txt --max-steps 3\n```\n"}, "venv")
    env = cli_env()
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env["PATH"]])
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "adopt"], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    m = (repo / ".autoresearch.toml").read_text()
    assert manifest_value(m, "setup") == f'"source {venv}/bin/activate"', m
    assert f"setup: source {venv}/bin/activate   (`python` on your PATH is {venv}/bin/python" in p.stdout, p.stdout
    hand = next(ln for ln in p.stdout.splitlines() if "try it by hand:" in ln)
    assert f"bash -c 'source {venv}/bin/activate && python charlm.py" in hand, hand
    # python on PATH is adopt's own interpreter (the other tests): no setup
    plain = make_repo({"train.py": CHARLM, "words.txt": "ada\n"}, "plain")
    assert cli("adopt", cwd=plain).returncode == 0
    assert manifest_value((plain / ".autoresearch.toml").read_text(), "setup") is None
