"""Benchmark: how long the duplicate check takes against 1k, 10k and 100k stored ideas.

Stored ideas are synthetic but shaped like real proposals: an [Experiment] paragraph and a
[Code Changes] paragraph of 60-160 words, drawn from a shared ML vocabulary (so unrelated ideas
overlap a lot, as real ones do) with concrete hyperparameter values. Queries mix fresh ideas
(the common case: no duplicate) with light rewordings of stored ones (must be found).

    .venv/bin/python bench/dedupe.py [--sizes 1000,10000,100000] [--queries 200]

Prints the index build time, mean and p95 milliseconds per query, and the recall on the reworded
duplicates. Target: 100k stored ideas <= 50 ms per query.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from autoresearchd.policies.dedupe import DuplicateIndex

TECH = """layer-wise learning rate decay|rotary position embeddings|ALiBi attention bias|QK layer norm|
RMSNorm instead of LayerNorm|SwiGLU feed-forward|GeGLU activation|multi-query attention|grouped-query
attention|sliding window attention|z-loss regularization|label smoothing|stochastic depth|dropout on
attention weights|weight tying between embedding and head|untied embeddings|Muon optimizer|Lion
optimizer|AdamW with decoupled weight decay|Sophia second-order optimizer|gradient clipping by global
norm|cosine learning rate schedule|warmup-stable-decay schedule|linear warmup|exponential moving
average of weights|sequence length curriculum|batch size warmup|token dropping|mixture of experts
router|value residual connections|U-net skip connections between blocks|logit soft-capping|
embedding scaling by sqrt(d_model)|zero-initialized output projections|orthogonal initialization|
per-head temperature in attention|advantage normalization per group|sequence-level importance
ratio|asymmetric clipping range|entropy bonus|KL penalty to the reference policy|reward shaping for
format|length-normalized rewards|difficulty curriculum from pass rates|rejection of all-correct
groups|token-level policy loss|reinforce with leave-one-out baseline""".replace("\n", " ").split("|")
PARTS = ["attention", "MLP", "embedding", "optimizer", "scheduler", "loss", "residual stream",
         "normalization", "initialization", "data loader", "rollout sampler", "reward function",
         "advantage estimator", "policy gradient", "value head", "output head", "tokenizer"]
VERBS = ["replace", "modify", "add", "scale", "remove", "introduce", "tune", "decay", "gate",
         "normalize", "clip", "warm up", "anneal", "share", "split", "route", "mask", "reweight"]
WHY = ["to stabilize early training", "because it reduces gradient noise", "which should speed up "
       "convergence", "to improve sample efficiency", "to reduce overfitting on easy problems",
       "so that rare tokens get larger updates", "to keep the update size constant across layers",
       "which helped in prior work on small transformers", "to avoid loss spikes",
       "to make better use of the fixed time budget", "to lower validation loss at the end"]
NUMS = ["0.1", "0.2", "0.5", "0.9", "0.95", "0.99", "1e-3", "3e-4", "6e-4", "1e-4", "2", "4", "8",
        "16", "64", "128", "256", "1024", "0.02", "0.01", "1.5", "3.0"]
FILES = ["train.py", "model.py", "grpo.py", "grpo_utils.py", "sample.py", "utils.py"]
# Real ideas name new flags, functions and tensors; these give each idea some words of its own.
ID_WORDS = """attn head temp scale gate norm mix decay warm cool skip route mask lr beta eps clip
ratio bias tok seq len group adv reward pass rate curr step embed proj out in qk vo mlp ffn res
block layer depth width ema momentum sharp smooth entropy kl ref policy value logit cap soft hard
""".split()


def ident(rng: random.Random) -> str:
    return "_".join(rng.sample(ID_WORDS, rng.randint(2, 3)))


def make_idea(rng: random.Random) -> str:
    techs = rng.sample(TECH, rng.randint(1, 3))
    exp = [f"[Experiment] {rng.choice(VERBS).capitalize()} the {rng.choice(PARTS)} using "
           f"{' combined with '.join(techs)} {rng.choice(WHY)}."]
    for _ in range(rng.randint(2, 5)):
        exp.append(f"{rng.choice(VERBS).capitalize()} the {rng.choice(PARTS)} with "
                   f"{rng.choice(TECH)} ({ident(rng)}={rng.choice(NUMS)}) {rng.choice(WHY)}.")
    code = [f"[Code Changes] In {rng.choice(FILES)}, {rng.choice(VERBS)} the {rng.choice(PARTS)} "
            f"function `{ident(rng)}` to apply {techs[0]} with coefficient {rng.choice(NUMS)}."]
    for _ in range(rng.randint(1, 4)):
        code.append(f"In {rng.choice(FILES)}, {rng.choice(VERBS)} {rng.choice(PARTS)} flag "
                    f"`{ident(rng)}` from {rng.choice(NUMS)} to {rng.choice(NUMS)} and log it.")
    return " ".join(exp) + "\n" + " ".join(code)


def reword(text: str, rng: random.Random) -> str:
    """A light rewording: a few words dropped or repeated, case changed, one word swapped."""
    words = text.split()
    for _ in range(max(1, len(words) // 40)):
        i = rng.randrange(len(words))
        if rng.random() < 0.5:
            del words[i]
        else:
            words.insert(i, words[i])
    return " ".join(words).replace("[Experiment] ", "**[Experiment]** ")


def run(sizes: list[int], n_queries: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    corpus = [make_idea(rng) for _ in range(max(sizes))]
    print(f"{'stored':>8} {'build_s':>8} {'fresh_ms':>9} {'fresh_p95':>9} {'dup_ms':>7} "
          f"{'recall':>6} {'false+':>6}")
    for size in sizes:
        idx = DuplicateIndex(90)
        t0 = time.perf_counter()
        idx.add_many([(f"e{i // 80:03d}-{i:08x}", corpus[i]) for i in range(size)])
        build = time.perf_counter() - t0
        qrng = random.Random(seed + size)
        fresh, dup, found, falsepos = [], [], 0, 0
        for _ in range(n_queries):
            q = make_idea(qrng)
            t = time.perf_counter()
            if idx.find(q) is not None:
                falsepos += 1
            fresh.append((time.perf_counter() - t) * 1e3)
            j = qrng.randrange(size)
            q = reword(corpus[j], qrng)
            t = time.perf_counter()
            hit = idx.find(q)
            dup.append((time.perf_counter() - t) * 1e3)
            found += hit is not None
        p95 = sorted(fresh)[int(0.95 * (len(fresh) - 1))]
        print(f"{size:>8} {build:>8.2f} {statistics.mean(fresh):>9.2f} {p95:>9.2f} "
              f"{statistics.mean(dup):>7.2f} {found / n_queries:>6.1%} {falsepos:>6}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    a = ap.parse_args()
    run([int(s) for s in a.sizes.split(",")], a.queries)


if __name__ == "__main__":
    main()
