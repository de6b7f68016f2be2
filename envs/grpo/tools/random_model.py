"""Build a randomly initialised Qwen2 model plus a locally trained tokenizer, saved in HF format.

No download: for CPU smoke tests (`--preset tiny`) and for GPU throughput checks at the real size
(`--preset qwen2.5-math-1.5b`: the architecture of Qwen/Qwen2.5-Math-1.5B with random weights, so
its accuracy means nothing). The tokenizer is a byte-level BPE trained on the given jsonl problems
and the r1-zero prompt; its ids are not Qwen's.

    python tools/random_model.py OUT_DIR --preset tiny --texts train.jsonl test.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
EOS = "<|endoftext|>"

# Qwen/Qwen2.5-Math-1.5B's config.json, architecture fields (vocab 151,936; 1.54 B parameters).
QWEN25_MATH_15B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=4096,
                       rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                       vocab_size=151936, hidden_act="silu", sliding_window=4096,
                       use_sliding_window=False, max_window_layers=21)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True)
PRESETS = {"tiny": TINY, "qwen2.5-math-1.5b": QWEN25_MATH_15B}


def corpus(paths: list[str]) -> list[str]:
    texts = [(HERE / "prompts" / "r1_zero.prompt").read_text(),
             "</think> <answer> \\boxed{} </answer>"]
    for p in paths:
        for line in Path(p).read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                texts += [row.get("problem", ""), str(row.get("answer", "")), row.get("solution", "")]
    return texts


def build_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=EOS, pad_token=EOS)


def build(out: Path, preset: str, texts: list[str], tokenizer_vocab: int, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if preset not in PRESETS:
        raise SystemExit(f"unknown preset '{preset}'; valid: {', '.join(PRESETS)}")
    tok = build_tokenizer(texts, tokenizer_vocab)
    arch = dict(PRESETS[preset])
    arch.setdefault("vocab_size", len(tok))
    cfg = Qwen2Config(**arch, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    big = preset != "tiny"
    with torch.device("cuda" if big and torch.cuda.is_available() else "cpu"):  # fast init
        model = Qwen2ForCausalLM(cfg)
    if big:
        model = model.to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    ap.add_argument("--texts", nargs="*", default=[], help="jsonl files to train the tokenizer on")
    ap.add_argument("--tokenizer-vocab", type=int, default=400)
    a = ap.parse_args(argv)
    build(Path(a.out), a.preset, corpus(a.texts), a.tokenizer_vocab)
    print(f"wrote a random {a.preset} model to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
