"""GPT-2 124M pre-training on FineWeb: the baseline that research ideas change. EDITABLE.

Run it through the frozen launcher (`python launch.py`), which starts one process per visible GPU
with torchrun and owns the wall-clock budget. What this file must keep doing, whatever else changes:

1. Stop when the launcher says so: when time.time() passes $NANOGPT_DEADLINE or the file
   $NANOGPT_STOP_FILE exists (checked every optimizer step), finish the step and save. A run that
   has not saved shortly after the deadline is killed and fails.
2. Save the final model in two parts: the body to $NANOGPT_ARTIFACT as a torch.export program
   mapping int64 tokens [batch, 1024] to final hidden states [batch, 1024, D] (batch dynamic),
   exported on the GPU it trained on; and the LM head's weights to $NANOGPT_HEAD as an .npz of
   arrays ('weight' [V>=50257, D], optionally 'bias' [V] and a scalar 'softcap'). The frozen
   evaluation runs only the body (never this code), in its own sandbox; the frozen scorer computes
   logits = softcap * tanh((h @ weight.T + bias) / softcap) itself and the loss on 10,485,760
   validation tokens, and checks at secret random positions that no position sees later tokens.
3. Read data only through shards.TokenLoader("train", ...); never read the validation split.
4. Honour NANOGPT_SMOKE=1 with a config tiny enough for a CPU check in seconds.

The global batch is 262,144 tokens per optimizer step on any number of GPUs: gradient
accumulation makes up for fewer GPUs (8 GPUs x 32 x 1024 needs none; 1 GPU accumulates 8).
"""

from __future__ import annotations

import math
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import shards


@dataclass
class Hyperparameters:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab_size: int = shards.VOCAB_SIZE
    seq_len: int = 1024
    micro_batch: int = 32              # sequences per GPU per forward/backward
    total_batch: int = 262_144         # tokens per optimizer step, over all GPUs
    num_iterations: int = 26_880       # schedule length; the time budget usually ends the run first
    learning_rate: float = 0.0015
    warmup_iters: int = 256
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    grad_clip: float = 1.0
    compile: bool = True
    export_batch: int = 2              # example batch for torch.export (the batch dim stays dynamic)
    log_every: int = 10


def smoke(h: Hyperparameters) -> Hyperparameters:
    """The tiny CPU config of the frozen check (`launch.py --smoke`)."""
    h.n_layer, h.n_head, h.n_embd, h.seq_len = 2, 2, 64, 64
    h.micro_batch, h.total_batch, h.warmup_iters = 4, 512, 2
    h.num_iterations = int(os.environ.get("NANOGPT_SMOKE_STEPS", 8))  # tests: more, to end by the budget
    h.learning_rate, h.compile, h.log_every = 1e-3, False, 1
    h.vocab_size = int(os.environ.get("NANOGPT_SMOKE_VOCAB", 512))   # a small vocabulary keeps CPU steps fast
    return h


# ----------------------------------------------------------------------------- model

def rmsnorm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, h: Hyperparameters):
        super().__init__()
        self.n_head, self.n_embd = h.n_head, h.n_embd
        self.c_attn = nn.Linear(h.n_embd, 3 * h.n_embd, bias=False)
        self.c_proj = nn.Linear(h.n_embd, h.n_embd, bias=False)
        self.out_scale = 1.0 / math.sqrt(2 * h.n_layer)   # keeps the residual stream's growth in check

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)) * self.out_scale


class MLP(nn.Module):
    def __init__(self, h: Hyperparameters):
        super().__init__()
        self.c_fc = nn.Linear(h.n_embd, 4 * h.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * h.n_embd, h.n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, h: Hyperparameters):
        super().__init__()
        self.attn, self.mlp = CausalSelfAttention(h), MLP(h)

    def forward(self, x):
        x = x + self.attn(rmsnorm(x))
        return x + self.mlp(rmsnorm(x))


class GPT(nn.Module):
    def __init__(self, h: Hyperparameters):
        super().__init__()
        self.h = h
        self.wte = nn.Embedding(h.vocab_size, h.n_embd)
        self.wpe = nn.Embedding(h.seq_len, h.n_embd)
        self.blocks = nn.ModuleList(Block(h) for _ in range(h.n_layer))
        self.lm_head = nn.Linear(h.n_embd, h.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight          # tied input and output embeddings
        for emb in (self.wte, self.wpe):
            nn.init.normal_(emb.weight, mean=0.0, std=0.02)

    def hidden(self, idx):
        """The final hidden states [B, T, n_embd], normalised: what the exported body returns."""
        T = idx.size(1)
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.blocks:
            x = block(x)
        return rmsnorm(x)

    def forward(self, idx, targets=None):
        """Logits [B, T, vocab] for all positions; with targets, the mean cross-entropy instead."""
        logits = self.lm_head(self.hidden(idx))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# ----------------------------------------------------------------------------- training

def report_progress(step: int, steps: int, loss: float) -> None:
    """The progress protocol (docs/environment.md, "Progress: learning curves"): one JSON line per
    point to $AUTORESEARCH_PROGRESS, `val_loss` holding the run's estimate (the training loss). The
    daemon plots it and may stop a losing idea by it; never the metric of record."""
    path = os.environ.get("AUTORESEARCH_PROGRESS")
    if path and math.isfinite(loss):
        with open(path, "a") as f:
            f.write(f'{{"step": {step}, "t": {progress_t(step, steps):.6f}, "val_loss": {loss:.6f}}}\n')


def progress_t(step: int, steps: int) -> float:
    """The share of the run done: of its steps or of the launcher's wall-clock budget, whichever is
    further on. The budget ends a real run first (about 2,650 of 26,880 steps on one H100), so
    step / steps alone stayed under 0.1 and a curve never reached the points a stopping rule reads."""
    t = step / steps
    budget = float(os.environ.get("NANOGPT_BUDGET_S") or 0)
    deadline = float(os.environ.get("NANOGPT_DEADLINE", "inf"))
    if budget > 0 and math.isfinite(deadline):
        t = max(t, 1.0 - (deadline - time.time()) / budget)
    return min(1.0, t)


def lr_at(step: int, h: Hyperparameters) -> float:
    """Linear warmup, then linear decay to 1/11 of the peak at num_iterations."""
    if step < h.warmup_iters:
        return h.learning_rate * (step + 1) / h.warmup_iters
    frac = min(1.0, (step - h.warmup_iters) / max(1, h.num_iterations - h.warmup_iters))
    return h.learning_rate * (1.1 - frac) / 1.1


def setup_distributed():
    """(rank, local_rank, world, device). torchrun sets RANK; a plain `python train.py` runs alone."""
    if "RANK" not in os.environ:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        return 0, 0, 1, torch.device(dev)
    rank, local, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        return rank, local, world, torch.device("cuda", local)
    dist.init_process_group("gloo")
    return rank, local, world, torch.device("cpu")


class StopSignal:
    """The launcher's stop: the deadline passed or the stop file appeared. All ranks agree."""

    def __init__(self, world: int, device: torch.device):
        self.deadline = float(os.environ.get("NANOGPT_DEADLINE", "inf"))
        self.stop_file = os.environ.get("NANOGPT_STOP_FILE", "")
        self.world, self.device = world, device

    def __call__(self) -> bool:
        stop = time.time() >= self.deadline or bool(self.stop_file and os.path.exists(self.stop_file))
        if self.world > 1:       # one rank's clock must not leave the others waiting in a collective
            flag = torch.tensor([float(stop)], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = flag.item() > 0
        return stop


class Body(nn.Module):
    """What the evaluation runs: tokens to final hidden states (the scorer applies the head)."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(self, idx):
        return self.model.hidden(idx)


def save_artifact(model: GPT, h: Hyperparameters, device: torch.device, path: str, head_path: str) -> float:
    """Export the body (fp32, eval mode) and save the head's weights, each written atomically;
    return the seconds it took."""
    t0 = time.time()
    model.eval()
    example = torch.randint(0, h.vocab_size, (h.export_batch, h.seq_len), device=device)
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    with torch.no_grad():
        program = torch.export.export(Body(model), (example,), dynamic_shapes={"idx": {0: batch}})
    for p in (path, head_path):
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
    tmp = path + ".partial.pt2"
    torch.export.save(program, tmp)
    os.replace(tmp, path)
    tmp = head_path + ".partial.npz"
    np.savez(tmp, weight=model.lm_head.weight.detach().float().cpu().numpy())
    os.replace(tmp, head_path)
    return time.time() - t0


def main() -> None:
    h = smoke(Hyperparameters()) if os.environ.get("NANOGPT_SMOKE") == "1" else Hyperparameters()
    rank, local, world, device = setup_distributed()
    master = rank == 0
    log = print if master else (lambda *a, **k: None)
    torch.manual_seed(int(os.environ.get("AUTORESEARCH_SEED", "0")))
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    per_pass = h.micro_batch * h.seq_len * world
    if h.total_batch % per_pass:
        raise SystemExit(f"total_batch {h.total_batch} is not a multiple of micro_batch x seq_len x GPUs "
                         f"= {h.micro_batch} x {h.seq_len} x {world}; change micro_batch")
    accum = h.total_batch // per_pass
    log(f"world {world} on {device.type}; micro-batch {h.micro_batch} x {h.seq_len}; "
        f"{accum} accumulation step(s) per {h.total_batch} tokens")

    model = GPT(h).to(device)
    log(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
    run_model = model
    if h.compile:
        import torch._inductor.config as inductor_config
        inductor_config.coordinate_descent_tuning = True
        run_model = torch.compile(model)
    if world > 1:
        run_model = DDP(run_model, device_ids=[local] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=h.learning_rate, betas=h.betas,
                                  weight_decay=h.weight_decay)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else nullcontext()
    loader = shards.TokenLoader("train", h.micro_batch, h.seq_len, rank, world)
    stop = StopSignal(world, device)

    def batch():
        x, y = loader.next_batch()
        if cuda:
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x, y

    step, t_start, t_first, t_mark, mark_step = 0, time.time(), None, time.time(), 0
    loss_sum = torch.zeros((), device=device)
    reason = "num_iterations"
    model.train()
    while step < h.num_iterations:
        if stop():
            reason = "time budget"
            break
        loss_sum.zero_()
        for micro in range(accum):
            x, y = batch()
            sync = world > 1 and micro < accum - 1
            with (run_model.no_sync() if sync else nullcontext()), autocast:
                loss = run_model(x, y) / accum
            loss.backward()
            loss_sum += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), h.grad_clip)
        lr = lr_at(step, h)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step == 1:
            if cuda:
                torch.cuda.synchronize()
            t_first = time.time() - t_start
            log(f"first step (includes compilation): {t_first:.1f}s")
            t_mark, mark_step = time.time(), 1
        if step % h.log_every == 0 and step > mark_step:
            train_loss = loss_sum.item()          # syncs with the GPU
            dt = (time.time() - t_mark) / max(1, step - mark_step)
            log(f"step {step}/{h.num_iterations} | loss {train_loss:.4f} | lr {lr:.2e} | "
                f"{dt * 1000:.0f} ms/step | {h.total_batch / dt:,.0f} tok/s")
            if master:
                report_progress(step, h.num_iterations, train_loss)
            t_mark, mark_step = time.time(), step

    train_loss = loss_sum.item()
    train_time = time.time() - t_start
    log(f"stopped after {step} steps ({reason}), {train_time:.1f}s")
    export_s = save_artifact(model, h, device, os.environ.get("NANOGPT_ARTIFACT", shards.ARTIFACT),
                             os.environ.get("NANOGPT_HEAD", shards.HEAD_ARTIFACT)) if master else 0.0
    steady = (train_time - (t_first or 0)) / max(1, step - 1)
    if master:
        print("---")
        print(f"train_loss: {train_loss:.6f}")
        print(f"steps: {step}")
        print(f"tokens: {step * h.total_batch}")
        print(f"train_time_s: {train_time:.1f}")
        print(f"first_step_s: {t_first or 0:.1f}")
        print(f"step_ms: {steady * 1000:.1f}")
        print(f"tokens_per_s: {h.total_batch / steady if step > 1 else 0:.0f}")
        print(f"export_s: {export_s:.1f}")
        if cuda:
            print(f"peak_mem_mib: {torch.cuda.max_memory_allocated() // 2 ** 20}")
    if dist.is_initialized():
        # A rank once aborted after the run had finished ("terminate called without an active
        # exception", SIGABRT, in CI): gloo's threads torn down with the interpreter are the known
        # cause (pytorch/pytorch#2530, #179291). Leaving by os._exit once the group is destroyed skips
        # that teardown; nothing after this line has work to do.
        dist.barrier()                     # the other ranks wait while rank 0 exports
        dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
