"""tinygpt: train a small GPT on the synthetic corpus in data.py, on CPU, in under a minute.

Editable: everything in this file (model, optimizer, schedule, batch size, number of steps...).
Contract with the frozen evaluate.py: at the end, save `out/model.pt`, a TorchScript module
(torch.jit.trace) that maps int64 tokens [B, T] to float logits [B, T, VOCAB_SIZE], where
evaluate.py calls it with B = EVAL_BATCH and T = data.SEQ_LEN. The logits at position t may
depend only on tokens 0..t of the same row (evaluate.py checks this).

Usage: python train.py            full run (STEPS steps; env TINYGPT_STEPS overrides)
       python train.py --check    a few steps on a tiny batch, then trace, save and check shapes
"""

import math
import os
import random
import sys
import time
from dataclasses import dataclass

# OpenMP threads that spin while they wait turn a busy machine into a crawl (measured: 15 steps
# took 101 s instead of 12 s at load 5 on 2 cores); sleeping waiters give the same numbers.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import data  # noqa: E402

EVAL_BATCH = 16          # the batch shape evaluate.py feeds the traced model (part of the contract)
ARTIFACT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "model.pt")


@dataclass
class Config:
    vocab_size: int = data.VOCAB_SIZE
    block_size: int = data.SEQ_LEN
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.1
    bias: bool = True
    # optimisation
    steps: int = 200
    batch_size: int = 16
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)   # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        B, T = idx.size()
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def configure_optimizer(model: GPT, cfg: Config):
    # weight decay on matrices only, not on biases, norms or embeddings' rows of 1-D params
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def lr_at(step: int, cfg: Config) -> float:
    """Linear warmup, then cosine decay from lr to min_lr over the remaining steps."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


def get_batch(tokens: torch.Tensor, cfg: Config, gen: torch.Generator):
    ix = torch.randint(len(tokens) - cfg.block_size - 1, (cfg.batch_size,), generator=gen)
    x = torch.stack([tokens[i:i + cfg.block_size] for i in ix])
    y = torch.stack([tokens[i + 1:i + 1 + cfg.block_size] for i in ix])
    return x, y


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


# The manifest's knobs ([[env.knobs]] in .autoresearch.toml): a tuner sets them through these
# variables. Absent, the Config default holds, which must stay equal to the knob's `baseline` there.
KNOBS = {"lr": float, "warmup_steps": int, "weight_decay": float, "n_embd": int}


def apply_knobs(cfg: Config, env=os.environ) -> Config:
    for name, cast in KNOBS.items():
        v = env.get("AUTORESEARCH_KNOB_" + name.upper())
        if v not in (None, ""):
            setattr(cfg, name, cast(v))
    return cfg


def save_artifact(model: GPT, cfg: Config, path: str = ARTIFACT) -> None:
    """Trace the model on the evaluation shape and save it: evaluate.py never imports this file."""
    model.eval()
    example = torch.zeros(EVAL_BATCH, data.SEQ_LEN, dtype=torch.long)
    with torch.no_grad():
        traced = torch.jit.trace(model, example)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    traced.save(path)


PROGRESS_EVERY = 10     # steps per learning-curve point (a mean of their training losses)


def report_progress(step: int, steps: int, loss: float) -> None:
    """The progress protocol (docs/environment.md, "Progress: learning curves"): one JSON line per point
    to $AUTORESEARCH_PROGRESS, `val_loss` holding the run's estimate of it (the recent training loss).
    The daemon plots it and may stop a losing idea by it; it is never the metric of record."""
    path = os.environ.get("AUTORESEARCH_PROGRESS")
    if path and math.isfinite(loss):
        with open(path, "a") as f:
            f.write(f'{{"step": {step + 1}, "t": {(step + 1) / steps:.6f}, "val_loss": {loss:.6f}}}\n')


def main() -> None:
    check = "--check" in sys.argv[1:]
    torch.set_num_threads(int(os.environ.get("TINYGPT_THREADS", "2")))
    seed = int(os.environ.get("AUTORESEARCH_SEED", "0"))
    gen = seed_everything(seed)
    cfg = apply_knobs(Config())
    if check:
        cfg.steps, cfg.batch_size, cfg.warmup_steps = 3, 4, 1
    elif os.environ.get("TINYGPT_STEPS"):
        cfg.steps = int(os.environ["TINYGPT_STEPS"])
    tokens = torch.tensor(data.train_tokens(), dtype=torch.long)

    model = GPT(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    opt = configure_optimizer(model, cfg)
    print(f"tinygpt: {n_params} params, {cfg.steps} steps, batch {cfg.batch_size}x{cfg.block_size}, seed {seed}",
          flush=True)

    t0 = time.time()
    model.train()
    recent: list[float] = []
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg)
        x, y = get_batch(tokens, cfg, gen)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        recent = (recent + [loss.item()])[-PROGRESS_EVERY:]
        if (step + 1) % PROGRESS_EVERY == 0 or step == cfg.steps - 1:
            report_progress(step, cfg.steps, sum(recent) / len(recent))
        if step % 25 == 0 or step == cfg.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}  lr {lr_at(step, cfg):.2e}  "
                  f"{time.time() - t0:.1f}s", flush=True)
        if not math.isfinite(loss.item()):
            sys.exit(f"loss is {loss.item()} at step {step}: training diverged")
    train_time = time.time() - t0

    save_artifact(model, cfg)
    if check:
        m = torch.jit.load(ARTIFACT)
        out = m(torch.randint(cfg.vocab_size, (EVAL_BATCH, data.SEQ_LEN)))
        assert out.shape == (EVAL_BATCH, data.SEQ_LEN, data.VOCAB_SIZE), f"bad logits shape {tuple(out.shape)}"
        assert torch.isfinite(out).all(), "non-finite logits"
        print("check ok")
    print("---")
    print(f"train_loss: {loss.item():.4f}")
    print(f"steps: {cfg.steps}")
    print(f"train_time_s: {train_time:.1f}")
    print(f"params: {n_params}")


if __name__ == "__main__":
    main()
