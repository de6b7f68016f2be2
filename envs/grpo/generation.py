"""Frozen generation helpers shared by evaluate.py (and usable by training): pick a backend and
sample completions with the r1-zero stop string, from vLLM on a GPU or transformers elsewhere."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

STOP = "</answer>"


@dataclass
class Completion:
    prompt_ids: list[int]
    response_ids: list[int]
    text: str


def vllm_available() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import vllm  # noqa: F401
    except Exception:  # an install without CUDA libraries fails on import in many ways
        return False
    return True


def pick_backend(requested: str) -> str:
    if requested not in ("auto", "vllm", "hf"):
        raise SystemExit(f"unknown backend '{requested}'; valid: auto, vllm, hf")
    if requested == "auto":
        return "vllm" if vllm_available() else "hf"
    if requested == "vllm" and not vllm_available():
        raise SystemExit("backend vllm asked for, but vllm does not import here or there is no GPU; "
                         "install the [gpu] extra on a CUDA host, or use --backend hf")
    return requested


class VocabMask:
    """Logits processor: never sample ids the tokenizer cannot decode (Qwen pads its embedding
    table past the tokenizer's vocabulary; a random or drifting policy could pick those rows)."""

    def __init__(self, n_valid: int):
        self.n_valid = n_valid

    def __call__(self, input_ids, scores):
        if scores.shape[-1] > self.n_valid:
            scores[:, self.n_valid:] = -float("inf")
        return scores


@torch.no_grad()
def hf_generate(model, tokenizer, prompts: list[str], n: int, max_tokens: int, temperature: float,
                top_p: float, batch_size: int, seed: int) -> list[list[Completion]]:
    """n samples per prompt with transformers' generate; left padding, per-sequence stop on STOP."""
    from transformers import LogitsProcessorList

    was_training = model.training
    model.eval()
    tokenizer.padding_side = "left"
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    dev = next(model.parameters()).device
    gen = torch.Generator(device="cpu").manual_seed(seed)
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    flat = [(i, p) for i, p in enumerate(prompts) for _ in range(n)]
    out: list[list[Completion]] = [[] for _ in prompts]
    for s in range(0, len(flat), batch_size):
        chunk = flat[s:s + batch_size]
        enc = tokenizer([p for _, p in chunk], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(dev)
        seqs = model.generate(
            **enc, do_sample=temperature > 0, temperature=temperature if temperature > 0 else None,
            top_p=top_p, top_k=0, max_new_tokens=max_tokens, stop_strings=[STOP], tokenizer=tokenizer,
            pad_token_id=pad, eos_token_id=eos,
            logits_processor=LogitsProcessorList([VocabMask(len(tokenizer))]))
        width = enc["input_ids"].shape[1]
        for row, (i, _) in enumerate(chunk):
            p_ids = enc["input_ids"][row][enc["attention_mask"][row].bool()].tolist()
            r_ids = seqs[row, width:].tolist()
            if eos in r_ids:                       # keep the first eos, drop the padding after it
                r_ids = r_ids[:r_ids.index(eos) + 1]
            elif pad in r_ids:
                r_ids = r_ids[:r_ids.index(pad)]
            text = tokenizer.decode(r_ids, skip_special_tokens=True)
            if STOP in text:                       # generate may overshoot the stop by a token
                text = text[:text.index(STOP) + len(STOP)]
            out[i].append(Completion(p_ids, r_ids, text))
    model.train(was_training)
    return out


def vllm_engine(model_path: str, gpu_memory_utilization: float, max_model_len: int, seed: int):
    """A vLLM engine living in this process (no engine subprocess), so the trainer can write the
    policy's weights straight into it."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM
    return LLM(model=model_path, dtype="bfloat16", gpu_memory_utilization=gpu_memory_utilization,
               max_model_len=max_model_len, seed=seed, enable_prefix_caching=True,
               trust_remote_code=False)


def vllm_generate(llm, prompts: list[str], n: int, max_tokens: int, temperature: float, top_p: float,
                  seed: int) -> list[list[Completion]]:
    from vllm import SamplingParams
    sp = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
                        stop=[STOP], include_stop_str_in_output=True, seed=seed)
    res = llm.generate(prompts, sp, use_tqdm=False)
    return [[Completion(list(r.prompt_token_ids), list(o.token_ids), o.text) for o in r.outputs]
            for r in res]
