"""`adopt` on a repo shaped like karpathy/ng-video-lecture (written here): two top-level scripts with
a training loop, `gpt.py` and `bigram.py`, neither called train*, no documented command, and the
`device = 'cuda' if torch.cuda.is_available() else 'cpu'` idiom.

- adopt finds the training script by its loop (a backward pass and an optimizer step), takes the
  largest and says which others it saw; before, it stopped with "no training script found";
- it freezes the data file the script opens by name (`input.txt`), which the evaluator must read;
- it does not claim that a script which falls back to the CPU "defaults to cuda";
- on a terminal, end of input at its commit question (Ctrl-D) is a "no", not a traceback.
"""

from __future__ import annotations

import sys

import pytest
from needs import not_here

from autoresearchd.validate import local_gpu_count

from conftest import git
from test_adopt_guesses import adopt_on_a_terminal, cli, manifest_value

if local_gpu_count():
    not_here("these tests check adopt's choices on a host without a CUDA device", module=True)

LOOP = '''import torch
import torch.nn as nn
batch_size = 32
learning_rate = {lr}
device = 'cuda' if torch.cuda.is_available() else 'cpu'
torch.manual_seed(1337)
with open('input.txt', 'r', encoding='utf-8') as f:
    text = f.read()
model = nn.Linear(4, 4).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
for iter in range(10):
    loss = model(torch.randn(2, 4)).pow(2).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"step {{iter}}: train loss {{loss.item():.4f}}, val loss {{loss.item():.4f}}")
'''
LECTURE = {
    "README.md": "# nanogpt-lecture\n\nCode created in the video lecture series.\n",
    "bigram.py": LOOP.format(lr="1e-2"),
    "gpt.py": LOOP.format(lr="3e-4") + "# a bigger model: more code than bigram.py\n" + "# ...\n" * 40,
    "input.txt": "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 50,
    "more.txt": "sampled text\n",
}


def test_adopt_finds_a_training_loop_not_called_train(make_repo):
    repo = make_repo(LECTURE, "lecture")
    p = cli("adopt", cwd=repo)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("training script: gpt.py;"), p.stdout
    assert "not sure: training script: gpt.py of gpt.py, bigram.py" in p.stdout, p.stdout
    m = (repo / ".autoresearch.toml").read_text()
    assert manifest_value(m, "run") == '"python gpt.py && python autoresearch_export.py"', m
    # the text it reads by name is frozen: ideas cannot edit it and the evaluator finds it beside itself
    assert manifest_value(m, "frozen").startswith('["autoresearch_eval.py", "autoresearch_model.py", "input.txt"]'), m
    # it falls back to the CPU by itself: nothing to add, nothing to say about it
    assert "defaults to cuda" not in p.stdout + m, p.stdout


def test_adopt_still_says_when_a_loop_is_nowhere(make_repo):
    repo = make_repo({"README.md": "# notes\n", "util.py": "def f():\n    return 1\n"}, "noloop")
    p = cli("adopt", cwd=repo)
    assert p.returncode == 2 and "no training script found" in p.stderr, p.stdout + p.stderr
    assert "backward pass and an optimizer step" in p.stderr and "Traceback" not in p.stderr
    assert not (repo / ".autoresearch.toml").exists()


def test_adopt_takes_end_of_input_at_its_question_as_no(make_repo):
    repo = make_repo({**LECTURE, "train.py": LECTURE["gpt.py"]}, "eof")    # found by its name, before too
    head = git(repo, "rev-parse", "HEAD").strip()
    code, text, left = adopt_on_a_terminal(repo, [(b"now, as they are? [y/N]", b"\x04")])    # Ctrl-D: end of input
    assert not left, text
    assert code == 0 and "Traceback" not in text and "EOFError" not in text, text
    assert "nothing committed" in text, text
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert (repo / ".autoresearch.toml").is_file()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-n", "0", "-q"]))
