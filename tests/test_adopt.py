"""`autoresearchd adopt` on a nanoGPT-shaped repo built here (a model file, a train script that prints
losses and saves a checkpoint, a hard-coded seed): adopt's output plus the filled-in template reach a
baseline note and one idea's note through the real CLI (`start --until idle`, replayed idea, local
runner). On the way: adopt commits nothing unasked, doctor writes nothing into the repo, start says
what it wrote, the identical seeds are reported, and CPU runs are CPU time."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.notes import Status
from autoresearchd.store.population import read_population

from conftest import git

pytest.importorskip("torch", reason="the nanoGPT-shaped repo trains with torch")

MODEL = '''"""A small GPT in the nanoGPT shape: GPTConfig, GPT(config), forward(idx, targets) -> (logits, loss)."""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    block_size: int = 32
    vocab_size: int = 64
    n_layer: int = 1
    n_head: int = 2
    n_embd: int = 32


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(c.n_embd), nn.LayerNorm(c.n_embd)
        self.qkv, self.proj = nn.Linear(c.n_embd, 3 * c.n_embd), nn.Linear(c.n_embd, c.n_embd)
        self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd), nn.GELU(), nn.Linear(4 * c.n_embd, c.n_embd))
        self.n_head = c.n_head

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(e, dim=2)
        q, k, v = (z.view(b, t, self.n_head, e // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, e))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        x = self.ln_f(x)
        if targets is None:                      # inference: the last position only
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
'''

TRAIN = '''"""Train the small GPT on data/input.txt (characters); save out/ckpt.pt. Prints losses as it goes."""
import os

import torch

from model import GPT, GPTConfig

out_dir = "out"
batch_size = 8
block_size = 32
max_iters = 20
eval_interval = 10
learning_rate = 3e-3
torch.manual_seed(1337)

text = open(os.path.join("data", "input.txt")).read()
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block_size - 1, (batch_size,))
    return (torch.stack([d[i:i + block_size] for i in ix]), torch.stack([d[i + 1:i + 1 + block_size] for i in ix]))


model_args = dict(block_size=block_size, vocab_size=len(chars), n_layer=1, n_head=2, n_embd=32)
model = GPT(GPTConfig(**model_args))
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
for it in range(max_iters + 1):
    if it % eval_interval == 0:
        model.eval()
        with torch.no_grad():
            losses = {s: model(*get_batch(s))[1].item() for s in ("train", "val")}
        print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        model.train()
    x, y = get_batch("train")
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
os.makedirs(out_dir, exist_ok=True)
torch.save({"model": model.state_dict(), "model_args": model_args}, os.path.join(out_dir, "ckpt.pt"))
'''

IDEA_DIFF = """--- a/train.py
+++ b/train.py
@@ -13,3 +13,3 @@
 eval_interval = 10
-learning_rate = 3e-3
+learning_rate = 6e-3
 torch.manual_seed(1337)
"""


def corpus() -> str:
    r = random.Random(0)
    words = "the cat sat on a mat and the dog ran to the park while birds sang in tall green trees".split()
    return "\n".join(" ".join(r.choice(words) for _ in range(r.randint(4, 10))) for _ in range(400)) + "\n"


VAL_TOKENS = ('    text = open("data/input.txt").read()\n'
              '    stoi = {ch: i for i, ch in enumerate(sorted(set(text)))}\n'
              '    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)\n'
              '    return data[int(0.9 * len(data)):]')


def fill_in(root: Path, val_tokens: str = VAL_TOKENS) -> None:
    """What the user does with adopt's templates: the two TODOs of the export, the one of the evaluator
    (`val_tokens`: the body that replaces it)."""
    exp = (root / "autoresearch_export.py").read_text()
    exp = exp.replace("BATCH, SEQ = 8, 64 ", "BATCH, SEQ = 4, 32 ")
    exp = exp.replace('    raise NotImplementedError("fill in load_trained_model() in autoresearch_export.py")',
                      '    from model import GPT, GPTConfig\n'
                      '    ckpt = torch.load("out/ckpt.pt", map_location="cpu")\n'
                      '    model = GPT(GPTConfig(**ckpt["model_args"]))\n'
                      '    model.load_state_dict(ckpt["model"])\n'
                      '    return model')
    exp = exp.replace("    out = model(idx)\n    return out[0] if isinstance(out, (tuple, list)) else out",
                      "    logits, _ = model(idx, idx)\n    return logits")
    ev = (root / "autoresearch_eval.py").read_text()
    ev = ev.replace('    raise NotImplementedError("fill in val_tokens() in autoresearch_eval.py")', val_tokens)
    assert "NotImplementedError" not in exp + ev
    (root / "autoresearch_export.py").write_text(exp)
    (root / "autoresearch_eval.py").write_text(ev)


def cli(*args, cwd, env=None, timeout=120):
    e = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
             **(env or {}))
    return subprocess.run([sys.executable, "-m", "autoresearchd.cli", *args], cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def nano(make_repo):
    return make_repo({"model.py": MODEL, "train.py": TRAIN, "data/input.txt": corpus()}, "nano")


def test_adopt_nanogpt_shaped_repo_to_baseline_and_idea_notes(nano, tmp_path):
    head = git(nano, "rev-parse", "HEAD").strip()
    p = cli("adopt", cwd=nano)
    assert p.returncode == 0, p.stderr
    line = TRAIN.splitlines().index("torch.manual_seed(1337)") + 1
    assert f"train.py:{line}: torch.manual_seed(1337)" in p.stdout and "nothing committed" in p.stdout
    assert git(nano, "rev-parse", "HEAD").strip() == head, "adopt committed without being asked"
    manifest = (nano / ".autoresearch.toml").read_text()
    assert 'run = "python train.py && python autoresearch_export.py"' in manifest
    assert 'metric = "val_loss"' in manifest and 'evaluate = "python autoresearch_eval.py"' in manifest
    assert 'model = "python autoresearch_model.py"' in manifest      # the split evaluation (issue 26)

    fill_in(nano)
    git(nano, "add", "-A")
    git(nano, "commit", "-qm", "autoresearchd environment")
    base = git(nano, "rev-parse", "HEAD").strip()

    # doctor before any start: reads, writes nothing into the user's repo
    cli("doctor", cwd=nano)
    repo = GitRepo(nano)
    assert repo.config_get("notes.displayRef") is None
    assert not (repo.git_dir / "hooks" / "reference-transaction").exists()

    replay = tmp_path / "ideas.jsonl"
    replay.write_text(json.dumps({"title": "Double the learning rate",
                                  "idea": "A higher learning rate converges faster in 20 steps.",
                                  "code_diff": IDEA_DIFF}) + "\n")
    env = {"AUTORESEARCHD_LLM__PROVIDER": "replay", "AUTORESEARCHD_LLM__REPLAY_FILE": str(replay),
           "AUTORESEARCHD_DAEMON__MAX_IDEAS": "1", "AUTORESEARCHD_DAEMON__TICK_S": "0.5",
           "AUTORESEARCHD_POLICY__BASELINE_SEEDS": "2", "AUTORESEARCHD_RUNNER__SLOTS": "2"}
    p = cli("start", "--until", "idle", cwd=nano, env=env, timeout=540)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    # consent: start said what it wrote and how to remove it (one log record, folded at the log's width)
    flat = " ".join(out.split())
    assert "notes.displayRef" in flat and "to remove" in flat and repo.config_get("notes.displayRef")

    pop = read_population(repo, "refs/heads/main")
    b = pop.baseline_note
    assert b is not None and b.status == Status.SUCCEEDED, (b, out[-3000:])
    assert 1.0 < b.value < 4.0 and b.seeds == [0, 1]
    assert b.trust == "split"          # adopt wrote the scorer + model-runner pair (issue 26)
    # the seed is hard-coded: both seeds are identical, and every channel says so
    assert any("identical" in f for f in b.flags) and "identical" in out
    assert not b.gpu_s and b.cpu_s and b.cpu_s > 0              # gpus = 0: CPU time, no GPU time
    idea = next(i for i in pop.ideas if i.branch)
    assert idea.title == "Double the learning rate"
    assert idea.note is not None and idea.note.status == Status.SUCCEEDED, (idea.note, out[-3000:])
    assert idea.note.decision != "promoted" and any(f.startswith("noise_unknown") for f in idea.note.flags)
    assert b"6e-3" in repo.read_files(idea.commit, ["train.py"])["train.py"]
    st = cli("status", cwd=nano)
    assert "identical" in st.stdout and "CPU-hours" in st.stdout and "GPU-hours" not in st.stdout
    # the daemon never touched the work tree, the index or HEAD
    assert git(nano, "rev-parse", "HEAD").strip() == base
    assert git(nano, "status", "--porcelain").strip() == ""


def test_adopt_asks_before_it_commits_and_never_overwrites(nano, tmp_path):
    head = git(nano, "rev-parse", "HEAD").strip()
    assert cli("adopt", str(nano), cwd=tmp_path).returncode == 0
    again = cli("adopt", str(nano), cwd=tmp_path)
    assert again.returncode == 2 and "exists already" in again.stderr and "--force" in again.stderr
    assert git(nano, "rev-parse", "HEAD").strip() == head
    p = cli("adopt", str(nano), "--force", "--commit", cwd=tmp_path)
    assert p.returncode == 0 and "committed" in p.stdout, p.stdout + p.stderr
    files = git(nano, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(files) == [".autoresearch.toml", ".gitignore", "autoresearch_eval.py", "autoresearch_export.py",
                             "autoresearch_model.py", "autoresearch_progress.py"]
    plain = tmp_path / "plain"
    plain.mkdir()
    bad = cli("adopt", str(plain), cwd=tmp_path)
    assert bad.returncode == 2 and "not the top of a git repo" in bad.stderr


def test_adopt_keeps_a_repo_that_prints_its_own_metrics_block(make_repo, tmp_path):
    repo = make_repo({"train.py": 'import random\nrandom.seed(0)\nprint("---")\nprint(f"val_acc: {0.5}")\n'}, "own")
    assert cli("adopt", cwd=repo).returncode == 0
    m = (repo / ".autoresearch.toml").read_text()
    assert 'run = "python train.py"' in m and 'metric = "val_acc"' in m and 'goal = "max"' in m
    assert "evaluate" not in m.split("[env]")[1].split("# Seeds")[0]
    assert not (repo / "autoresearch_eval.py").exists()


def test_init_says_what_it_wrote_and_the_removal_line_removes_it(make_repo, tmp_path):
    repo = make_repo({"train.py": "print('hi')\n"}, "mine")
    p = cli("init", str(repo), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    line = p.stdout.strip()
    assert len(line.splitlines()) == 1 and "notes.displayRef" in line and "hooks/reference-transaction" in line
    g = GitRepo(repo)
    assert g.config_get("notes.displayRef") and (g.git_dir / "hooks" / "post-receive").exists()
    assert "already configured" in cli("init", str(repo), cwd=tmp_path).stdout     # nothing new: says so
    undo = line.split("to remove: ", 1)[1]
    subprocess.run(["bash", "-c", undo], cwd=repo, check=True)
    assert g.config_get("notes.displayRef") is None and g.config_get("receive.denyCurrentBranch") is None
    assert g.config_get("receive.fsckObjects") is None and g.config_get("receive.maxInputSize") is None
    assert g.config_get("core.hooksPath") is None
    assert not (g.git_dir / "hooks" / "post-receive").exists()
    assert not (g.git_dir / "hooks" / "reference-transaction").exists()


def test_reading_commands_write_nothing_into_the_repo(toy_env, tmp_path):
    """Consent: before `init` or `start`, `doctor` and `status` leave the user's .git as it was."""
    from conftest import write_config
    cfg = write_config(tmp_path, toy_env)
    g = GitRepo(toy_env)
    before = sorted(p.name for p in g.git_dir.iterdir()), (g.git_dir / "config").read_text()
    for cmd in ("doctor", "status"):
        cli("--config", str(cfg), cmd, cwd=tmp_path)
    assert (sorted(p.name for p in g.git_dir.iterdir()), (g.git_dir / "config").read_text()) == before
    assert not [h for h in (g.git_dir / "hooks").iterdir() if not h.name.endswith(".sample")]
