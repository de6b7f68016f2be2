"""Learning curves of a public training repo on CPU (issue 29): karpathy/makemore's models trained by a
short loop of ours, each idea a change of the model type or of the arguments makemore itself exposes,
at several seeds, written in the JSON format bench/collect_curves.py writes, so bench/calibrate_curves.py
fits them as it fits tinygpt's.

    python bench/makemore_curves.py --repo PATH --out curves_makemore.json [--seeds 0,1,2]
        [--steps 800] [--ideas 20] [--parallel 1] [--resume] [--quick]

--repo is a user's clone of karpathy/makemore (a directory with makemore.py and names.txt); none of its
code or data is kept here: makemore.py is imported from that path. What is makemore's and what is ours:
- makemore's: create_datasets (the names, the CharDataset encoding), ModelConfig, the model classes
  (Transformer, Bigram, MLP, RNN with cell_type, BoW) and its AdamW settings (betas 0.9/0.99, eps 1e-8,
  its lr and weight decay as an idea sets them).
- ours: the loop. The train/test split is FIXED for every run (create_datasets' torch.randperm runs
  under torch.manual_seed(SPLIT_SEED)); the run is then seeded with the trial seed (its init and its
  batches). One thread per run (torch.set_num_threads(1)). The progress curve is the mean training loss
  over each window of steps, POINTS windows (every 5% of training), at t = window end / steps; the final
  metric `val_loss` is the mean test loss over the whole fixed test set (every word, equal-size batches
  weighted by their word count).
The baseline is the README's transformer defaults (4 layers, 4 heads, n_embd 64, batch 32, lr 5e-4,
weight decay 0.01) run for --steps (default STEPS = 800: 20 to 26 s a run on one core, docs/policies.md).

Output: {"env": "makemore", "steps": S, "seeds": [...], "runs": [{"idea", "seed", "status", "config",
"params", "progress": {"t": [...], "value": [...]}, "val_loss", "wall_s"}]}; the idea "baseline" is the
unchanged defaults, as calibrate_curves.py expects.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import io
import json
import sys
import time
import types
from pathlib import Path

STEPS = 800             # the baseline takes about 20 s on one idle core (docs/policies.md, makemore section)
POINTS = 20             # progress points: one per 5% of training
SPLIT_SEED = 1234       # the fixed train/test split every run shares
QUICK_STEPS = 40
# makemore's README defaults (its argparse defaults): the baseline
DEFAULTS = {"type": "transformer", "n_layer": 4, "n_head": 4, "n_embd": 64, "n_embd2": 64,
            "batch_size": 32, "learning_rate": 5e-4, "weight_decay": 0.01}
# (title, overrides of DEFAULTS): model types and the arguments makemore exposes, nothing else.
# Expected over a short run: a higher lr and a smaller model should win, the bigram/BoW/plain RNN and a
# lower lr should lose; the rest is what the curves are for.
IDEAS = [
    ("learning rate 1e-3", {"learning_rate": 1e-3}),
    ("GRU instead of the transformer", {"type": "gru"}),
    ("bigram instead of the transformer", {"type": "bigram"}),
    ("learning rate 2e-3", {"learning_rate": 2e-3}),
    ("8 heads", {"n_head": 8}),
    ("weight decay 0.1", {"weight_decay": 0.1}),
    ("MLP instead of the transformer", {"type": "mlp"}),
    ("plain RNN instead of the transformer", {"type": "rnn"}),
    ("bag of words instead of the transformer", {"type": "bow"}),
    ("learning rate 2e-4", {"learning_rate": 2e-4}),
    ("learning rate 5e-3", {"learning_rate": 5e-3}),
    ("2 heads", {"n_head": 2}),
    ("2 layers", {"n_layer": 2}),
    ("6 layers", {"n_layer": 6}),
    ("1 layer", {"n_layer": 1}),
    ("embedding width 32", {"n_embd": 32}),
    ("embedding width 128", {"n_embd": 128}),
    ("batch size 64", {"batch_size": 64}),
    ("batch size 16", {"batch_size": 16}),
    ("no weight decay", {"weight_decay": 0.0}),
]


def load_makemore(repo: Path) -> types.ModuleType:
    """makemore.py imported from the user's clone. It imports torch.utils.tensorboard.SummaryWriter at
    module top (tensorboard need not be installed): a stub module stands in, since our own loop logs
    nothing to tensorboard and never makes a writer."""
    if "torch.utils.tensorboard" not in sys.modules:
        stub = types.ModuleType("torch.utils.tensorboard")
        stub.SummaryWriter = None
        sys.modules["torch.utils.tensorboard"] = stub
    spec = importlib.util.spec_from_file_location("makemore_user", repo / "makemore.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def windows(losses: list[float], points: int = POINTS) -> tuple[list[float], list[float]]:
    """The progress curve: the mean of `losses` (one per step) over each of `points` consecutive
    windows, at t = the window's last step / len(losses). Fewer steps than points: one point per step."""
    n = len(losses)
    k = min(points, n)
    ends = [round(n * (i + 1) / k) for i in range(k)]
    ts, vs, start = [], [], 0
    for end in ends:
        w = losses[start:end]
        ts.append(round(end / n, 6))
        vs.append(sum(w) / len(w))
        start = end
    return ts, vs


def make_model(mm, cfg: dict, vocab: int, block: int):
    config = mm.ModelConfig(vocab_size=vocab, block_size=block, n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                            n_embd=cfg["n_embd"], n_embd2=cfg["n_embd2"])
    kind = cfg["type"]
    if kind in ("rnn", "gru"):
        return mm.RNN(config, cell_type=kind)
    classes = {"transformer": "Transformer", "bigram": "Bigram", "mlp": "MLP", "bow": "BoW"}
    return getattr(mm, classes[kind])(config)


def stack(ds, idx) -> tuple:
    """The items `idx` of a makemore CharDataset as one (x, y) batch."""
    import torch
    xs, ys = zip(*(ds[i] for i in idx))
    return torch.stack(xs), torch.stack(ys)


def test_loss(model, ds, batch: int = 100) -> float:
    """The mean loss over every word of the fixed test set (makemore's evaluate stops at max_batches
    and reads a global `args`; this reads all of it, each batch weighted by its size)."""
    import torch
    model.eval()
    total, n = 0.0, len(ds)
    with torch.inference_mode():
        for s in range(0, n, batch):
            idx = list(range(s, min(n, s + batch)))
            _, loss = model(*stack(ds, idx))
            total += loss.item() * len(idx)
    model.train()
    return total / n


def run_one(repo: str, title: str, over: dict, seed: int, steps: int) -> dict:
    import torch
    torch.set_num_threads(1)
    cfg = {**DEFAULTS, **over}
    row = {"idea": title, "seed": seed, "status": "ok", "config": over, "params": None,
           "progress": {"t": [], "value": []}, "val_loss": None, "wall_s": None}
    mm = load_makemore(Path(repo))
    torch.manual_seed(SPLIT_SEED)            # the same split for every run
    with contextlib.redirect_stdout(io.StringIO()):     # create_datasets prints its stats
        train, test = mm.create_datasets(str(Path(repo) / "names.txt"))
    # every training word encoded once by makemore's CharDataset (what its DataLoader does per batch)
    xs, ys = stack(train, range(len(train)))
    torch.manual_seed(seed)                  # the trial's seed: init and batches
    gen = torch.Generator().manual_seed(seed)
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the Transformer prints its size
            model = make_model(mm, cfg, train.get_vocab_size(), train.get_output_length())
        row["params"] = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"], weight_decay=cfg["weight_decay"],
                                betas=(0.9, 0.99), eps=1e-8)
        losses = []
        for _ in range(steps):
            idx = torch.randint(len(train), (cfg["batch_size"],), generator=gen)
            _, loss = model(xs[idx], ys[idx])
            model.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        t, v = windows(losses)
        row["progress"] = {"t": t, "value": v}
        row["val_loss"] = round(test_loss(model, test), 6)
    except Exception as e:  # a config makemore rejects (heads not dividing n_embd): recorded, not fatal
        row["status"] = f"failed: {type(e).__name__}: {e}"[:200]
    row["wall_s"] = round(time.monotonic() - t0, 1)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", required=True, help="a clone of karpathy/makemore (makemore.py, names.txt)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default=None, help="default 0,1,2 (0,1 with --quick)")
    ap.add_argument("--steps", type=int, default=None, help=f"training steps (default {STEPS})")
    ap.add_argument("--ideas", type=int, default=len(IDEAS), help="at most this many ideas of IDEAS")
    ap.add_argument("--parallel", type=int, default=1, help="runs at once (processes, one thread each)")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --out and run only the rest")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke check: 1 idea + baseline, {QUICK_STEPS} steps, seeds 0,1 (calibrate_curves.py "
                         "needs the baseline at two seeds)")
    a = ap.parse_args(argv)
    repo = Path(a.repo).resolve()
    if not (repo / "makemore.py").is_file() or not (repo / "names.txt").is_file():
        raise SystemExit(f"{repo}: not a makemore clone (makemore.py and names.txt)")
    steps = a.steps or (QUICK_STEPS if a.quick else STEPS)
    seeds = [int(s) for s in (a.seeds or ("0,1" if a.quick else "0,1,2")).split(",")]
    ideas = IDEAS[: 1 if a.quick else a.ideas]
    work = [("baseline", {}, s) for s in seeds] + [(t, o, s) for t, o in ideas for s in seeds]
    runs = []
    out = Path(a.out)
    if a.resume and out.exists():
        runs = json.loads(out.read_text())["runs"]
        done = {(r["idea"], r["seed"]) for r in runs}
        work = [w for w in work if (w[0], w[2]) not in done]
        print(f"resuming: {len(runs)} runs kept, {len(work)} to go", flush=True)
    args = [(str(repo), t, o, s, steps) for t, o, s in work]
    ex = concurrent.futures.ProcessPoolExecutor(a.parallel) if a.parallel > 1 else None
    rows = ex.map(run_one, *zip(*args)) if (ex and args) else (run_one(*x) for x in args)
    for row in rows:
        runs.append(row)
        print(f"{row['idea'][:40]:40s} seed {row['seed']}: {row['status']} val_loss {row['val_loss']} "
              f"({len(row['progress']['t'])} points, {row['wall_s']} s)", flush=True)
        out.write_text(json.dumps({"env": "makemore", "steps": steps, "seeds": seeds, "runs": runs},
                                  indent=1) + "\n")
    if ex:
        ex.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
