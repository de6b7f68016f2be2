"""GRPO post-training of a causal LM on MATH with the r1-zero prompt (the paper's recipe).

Each step: sample `prompts_per_step` training problems, roll out `group_size` responses for each,
score them with the r1-zero reward, normalise rewards within each group (advantage), then take
optimizer steps on the clipped policy-gradient loss over the rollouts in micro-batches.
Defaults are the paper's: Qwen2.5-Math-1.5B, 128 prompts x 8 samples, lr 1e-5, clip 0.2,
AdamW(0.9, 0.95, no weight decay), micro-batch 4 x 16 accumulation, 1024 new tokens at temperature 1.
The policy is saved to ./policy (HF format); the frozen evaluate.py measures it. Numbers printed
here are for people; they are never the metric. Editable: ideas change this file.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import time
from dataclasses import dataclass

import torch

from grader import r1_zero_reward
from math_data import TRAIN_FILE, data_dir, load_problems, prompt_template, r1_zero_prompt
from rollout import Rollouts


@dataclass
class Config:
    model: str = os.environ.get("GRPO_MODEL", "Qwen/Qwen2.5-Math-1.5B")
    out: str = "policy"
    lr: float = 1e-5
    grpo_steps: int = 20
    group_size: int = 8
    prompts_per_step: int = 128
    micro_batch: int = 4
    grad_accum: int = 16
    cliprange: float = 0.2
    loss: str = "grpo_clip"            # grpo_clip | reinforce_with_baseline
    std_normalize: bool = True
    advantage_eps: float = 1e-6
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    backend: str = "auto"              # auto | vllm | hf
    hf_batch: int = 256                # sequences per transformers generate call
    vllm_memory: float = 0.35          # GPU share for vLLM; the rest trains the policy
    train_limit: int = 0               # use only the first N training problems (0: all)
    save_margin_s: float = 180.0       # stop early enough to save inside the time budget
    seed: int = int(os.environ.get("AUTORESEARCH_SEED", "0"))


def parse_args() -> Config:
    ap = argparse.ArgumentParser(description="GRPO on MATH")
    for f in dataclasses.fields(Config):
        kind = (lambda s: s.lower() in ("1", "true", "yes")) if f.type in (bool, "bool") else type(f.default)
        ap.add_argument("--" + f.name.replace("_", "-"), type=kind, default=f.default)
    return Config(**vars(ap.parse_args()))


def group_advantages(rewards: torch.Tensor, g: int, std_normalize: bool, eps: float) -> torch.Tensor:
    grouped = rewards.view(-1, g)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if std_normalize:
        adv = adv / (grouped.std(dim=1, keepdim=True) + eps)
    return adv.view(-1)


def pack(samples, pad_id: int, device):
    """Right-padded prompt+response ids; labels shifted by one; mask over response tokens."""
    seqs = [s.prompt_ids + s.response_ids for s in samples]
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    resp = torch.zeros_like(ids)
    for i, (s, x) in enumerate(zip(samples, seqs)):
        ids[i, :len(x)] = torch.tensor(x)
        attn[i, :len(x)] = 1
        resp[i, len(s.prompt_ids):len(x)] = 1
    return (ids[:, :-1].to(device), attn[:, :-1].to(device), ids[:, 1:].to(device),
            resp[:, 1:].float().to(device))


def token_logprobs(model, ids, attn, labels) -> torch.Tensor:
    logits = model(input_ids=ids, attention_mask=attn).logits.float()
    return torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def policy_loss(cfg: Config, logp, old_logp, adv, mask):
    """Token-level loss averaged over the response tokens of the micro-batch (the paper's)."""
    if cfg.loss == "grpo_clip":
        ratio = torch.exp(logp - old_logp)
        per_tok = -torch.min(ratio * adv, ratio.clamp(1 - cfg.cliprange, 1 + cfg.cliprange) * adv)
        clipped = ((ratio - 1).abs() > cfg.cliprange).float()
    elif cfg.loss == "reinforce_with_baseline":
        per_tok, clipped = -adv * logp, torch.zeros_like(logp)
    else:
        raise SystemExit(f"unknown loss '{cfg.loss}'; valid: grpo_clip, reinforce_with_baseline")
    denom = mask.sum().clamp(min=1)
    return (per_tok * mask).sum() / denom, (clipped * mask).sum() / denom


def main() -> None:
    cfg = parse_args()
    print("config:", dataclasses.asdict(cfg), flush=True)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t_start = time.time()
    budget = float(os.environ.get("AUTORESEARCH_TIME_BUDGET_S", "0")) or None
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    tok = AutoTokenizer.from_pretrained(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(
        cfg.model, dtype=torch.bfloat16 if cuda else torch.float32).to(device)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)

    rows = load_problems(data_dir() / TRAIN_FILE)
    rows = rows[: cfg.train_limit] if cfg.train_limit else rows
    template = prompt_template()
    roll = Rollouts(cfg.backend, model, tok, cfg.model, max_tokens=cfg.max_tokens,
                    temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed, hf_batch=cfg.hf_batch,
                    gpu_memory_utilization=cfg.vllm_memory, max_model_len=2048 + cfg.max_tokens)
    print(f"rollout backend: {roll.backend}; {len(rows)} training problems", flush=True)

    last_step_s, reward = 0.0, float("nan")
    for step in range(cfg.grpo_steps):
        if budget and time.time() - t_start + last_step_s * 1.2 + cfg.save_margin_s > budget:
            print(f"step {step}: stopping to stay inside the {budget:.0f}s budget", flush=True)
            break
        t0 = time.time()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync_s = roll.sync()
        batch = random.sample(rows, min(cfg.prompts_per_step, len(rows)))
        groups = roll.sample([r1_zero_prompt(r["problem"], template) for r in batch], cfg.group_size)
        t_roll = time.time() - t0 - sync_s
        samples = [c for g in groups for c in g]
        golds = [str(r["answer"]) for r in batch for _ in range(cfg.group_size)]
        scores = [r1_zero_reward(c.text, g) for c, g in zip(samples, golds)]
        rewards = torch.tensor([s["reward"] for s in scores])
        adv = group_advantages(rewards, cfg.group_size, cfg.std_normalize, cfg.advantage_eps)
        n_tok = sum(len(c.response_ids) for c in samples)

        model.train()
        mbs = [list(range(i, min(i + cfg.micro_batch, len(samples))))
               for i in range(0, len(samples), cfg.micro_batch)]
        with torch.no_grad():  # the rollout policy's log-probs, before any update of this step
            old = [token_logprobs(model, *pack([samples[j] for j in mb], pad_id, device)[:3]) for mb in mbs]
        clip_sum, n_opt = 0.0, 0
        for k, mb in enumerate(mbs):
            ids, attn, labels, mask = pack([samples[j] for j in mb], pad_id, device)
            logp = token_logprobs(model, ids, attn, labels)
            loss, clip = policy_loss(cfg, logp, old[k], adv[mb].to(device).unsqueeze(-1), mask)
            (loss / cfg.grad_accum).backward()
            clip_sum += clip.item()
            if (k + 1) % cfg.grad_accum == 0 or k + 1 == len(mbs):
                opt.step()
                opt.zero_grad(set_to_none=True)
                n_opt += 1
        del old
        last_step_s = time.time() - t0
        reward = rewards.mean().item()
        peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
        print(f"step {step} reward {reward:.4f} format {sum(s['format_reward'] for s in scores) / len(scores):.3f} "
              f"rollout {t_roll:.1f}s ({n_tok / max(t_roll, 1e-9):.0f} tok/s, {n_tok} tokens) "
              f"sync {sync_s:.2f}s train {last_step_s - t_roll - sync_s:.1f}s opt_steps {n_opt} "
              f"clip {clip_sum / len(mbs):.4f} total {last_step_s:.1f}s peak_mem {peak:.1f}GiB", flush=True)

    os.makedirs(cfg.out, exist_ok=True)
    model.save_pretrained(cfg.out, safe_serialization=True)
    tok.save_pretrained(cfg.out)
    print(f"saved policy to {cfg.out} after {time.time() - t_start:.0f}s", flush=True)
    print("---")
    print(f"train_reward_last: {reward:.4f}")
    print(f"train_seconds: {time.time() - t_start:.1f}")


if __name__ == "__main__":
    main()
