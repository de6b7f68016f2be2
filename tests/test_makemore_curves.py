"""bench/makemore_curves.py, the learning curves of karpathy/makemore (issue 29): the parts that are ours
(the progress windows, the fixed split, the JSON that bench/calibrate_curves.py fits, --resume), run
against a tiny stand-in written here with makemore's API names (none of makemore's code is in this
repo: the script imports the user's clone)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="makemore_curves.py trains torch models (torch not installed)")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import calibrate_curves as C  # noqa: E402
import makemore_curves as M  # noqa: E402

# the stand-in: makemore.py's names (ModelConfig, create_datasets with a torch.randperm split, model
# classes returning (logits, loss)), one bigram table behind every class; it imports SummaryWriter at
# the top as makemore does, and logs its test split next to itself so the test can compare splits
STAND_IN = '''
import torch
from dataclasses import dataclass
from pathlib import Path
from torch.nn import functional as F
from torch.utils.tensorboard import SummaryWriter

@dataclass
class ModelConfig:
    block_size: int = None
    vocab_size: int = None
    n_layer: int = 4
    n_embd: int = 64
    n_embd2: int = 64
    n_head: int = 4

class Words:
    def __init__(self, words, chars, n):
        self.words, self.n = words, n
        self.stoi = {c: i + 1 for i, c in enumerate(chars)}
        self.vocab = len(chars) + 1
    def __len__(self):
        return len(self.words)
    def get_vocab_size(self):
        return self.vocab
    def get_output_length(self):
        return self.n + 1
    def __getitem__(self, i):
        ix = torch.tensor([self.stoi[c] for c in self.words[i]], dtype=torch.long)
        x = torch.zeros(self.n + 1, dtype=torch.long)
        y = torch.zeros(self.n + 1, dtype=torch.long)
        x[1:1 + len(ix)] = ix
        y[:len(ix)] = ix
        y[len(ix) + 1:] = -1
        return x, y

def create_datasets(input_file):
    words = [w.strip() for w in open(input_file).read().splitlines() if w.strip()]
    chars = sorted(set("".join(words)))
    n = max(len(w) for w in words)
    rp = torch.randperm(len(words)).tolist()
    test = [words[i] for i in rp[-10:]]
    with open(Path(__file__).with_name("split.log"), "a") as f:
        f.write(",".join(test) + "\\n")
    return Words([words[i] for i in rp[:-10]], chars, n), Words(test, chars, n)

class Transformer(torch.nn.Module):
    def __init__(self, config, cell_type=None):
        super().__init__()
        self.table = torch.nn.Embedding(config.vocab_size, config.vocab_size)
    def forward(self, idx, targets=None):
        logits = self.table(idx)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

Bigram = MLP = RNN = BoW = Transformer
'''

WORDS = ["anna", "bob", "carla", "dave", "eve", "fred", "gina", "hank", "ivy", "jon", "kim", "lena",
         "mona", "ned", "olga", "pete", "quin", "rosa", "sam", "tina", "uma", "vic", "walt", "xena",
         "yara", "zed", "abe", "bea", "cid", "dora"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    d = tmp_path / "makemore"
    d.mkdir()
    (d / "makemore.py").write_text(STAND_IN)
    (d / "names.txt").write_text("\n".join(WORDS) + "\n")
    return d


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "makemore_curves.py"), *args],
                          capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.parametrize("n,points", [(100, 20), (30, 20), (7, 20), (40, 20), (20, 5)])
def test_windows_cover_every_step_once(n, points):
    losses = [float(i) for i in range(n)]
    t, v = M.windows(losses, points)
    k = min(n, points)
    assert len(t) == len(v) == k
    assert t[-1] == 1.0 and all(a < b for a, b in zip(t, t[1:]))
    # each point is the mean of its window, and the windows tile the steps: the step-weighted means
    # sum back to the total loss (a step counted twice or dropped would not)
    sizes = [round(x * n) - round(y * n) for x, y in zip(t, [0.0] + t[:-1])]
    assert sum(sizes) == n and min(sizes) >= 1
    assert sum(s * m for s, m in zip(sizes, v)) == pytest.approx(sum(losses))
    if n == 100:     # every 5% of training
        assert t == [pytest.approx(i / 20) for i in range(1, 21)] and v[0] == pytest.approx(2.0)


def test_quick_file_is_what_calibrate_fits(repo, tmp_path):
    out = tmp_path / "quick.json"
    _cli("--repo", str(repo), "--out", str(out), "--quick")
    doc = json.loads(out.read_text())
    assert doc["env"] == "makemore" and doc["steps"] == M.QUICK_STEPS and doc["seeds"] == [0, 1]
    ideas = {(r["idea"], r["seed"]) for r in doc["runs"]}
    assert ideas == {("baseline", 0), ("baseline", 1), (M.IDEAS[0][0], 0), (M.IDEAS[0][0], 1)}
    for r in doc["runs"]:
        assert r["status"] == "ok" and r["val_loss"] > 0 and r["wall_s"] >= 0
        assert len(r["progress"]["t"]) == M.POINTS and r["progress"]["t"][-1] == 1.0
    base = [r for r in doc["runs"] if r["idea"] == "baseline"]
    assert base[0]["progress"]["value"] != base[1]["progress"]["value"]     # the seed is the trial's
    # the split is the same for every run (4 runs, one test set)
    splits = (repo / "split.log").read_text().splitlines()
    assert len(splits) == 4 and len(set(splits)) == 1
    res = C.fit(C.load([str(out)]), C.env_of([str(out)]))
    assert res["env"] == "makemore" and "makemore_curves.py" in res["source"]
    assert [r["idea"] for r in res["ideas"]] == [M.IDEAS[0][0]]
    table = subprocess.run([sys.executable, str(ROOT / "bench" / "calibrate_curves.py"), str(out)],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert M.IDEAS[0][0] in table


def test_resume_keeps_the_runs_it_has(repo, tmp_path):
    out = tmp_path / "c.json"
    _cli("--repo", str(repo), "--out", str(out), "--ideas", "1", "--seeds", "0", "--steps", "10")
    doc = json.loads(out.read_text())
    assert [(r["idea"], r["seed"]) for r in doc["runs"]] == [("baseline", 0), (M.IDEAS[0][0], 0)]
    doc["runs"][0]["wall_s"] = -1.0          # a mark: a kept run is not run again
    out.write_text(json.dumps(doc))
    p = _cli("--repo", str(repo), "--out", str(out), "--ideas", "2", "--seeds", "0", "--steps", "10", "--resume")
    assert "2 runs kept, 1 to go" in p.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [(r["idea"], r["seed"]) for r in runs] == [("baseline", 0), (M.IDEAS[0][0], 0), (M.IDEAS[1][0], 0)]
    assert runs[0]["wall_s"] == -1.0


def test_calibrate_refuses_mixed_envs(tmp_path):
    files = []
    for env in ("tinygpt", "makemore"):
        f = tmp_path / f"{env}.json"
        f.write_text(json.dumps({"env": env, "runs": []}))
        files.append(str(f))
    with pytest.raises(SystemExit, match="different envs"):
        C.load(files)


def test_ideas_change_only_what_makemore_exposes():
    assert len(M.IDEAS) >= 20 and len({t for t, _ in M.IDEAS}) == len(M.IDEAS)
    for _, over in M.IDEAS:
        assert over and set(over) <= set(M.DEFAULTS)
        assert over.get("type", "transformer") in ("transformer", "bigram", "mlp", "rnn", "gru", "bow")
