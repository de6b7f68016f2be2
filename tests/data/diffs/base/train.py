"""Train a tiny character-level model and print the final validation loss."""

import math
import time

import torch

from data import get_batch, load_text
from model import TinyModel

BATCH_SIZE = 32
BLOCK_SIZE = 64
LEARNING_RATE = 3e-3
MAX_STEPS = 500
EVAL_EVERY = 100
WARMUP_STEPS = 0


def get_lr(step):
    if step < WARMUP_STEPS:
        return LEARNING_RATE * (step + 1) / WARMUP_STEPS
    return LEARNING_RATE


@torch.no_grad()
def evaluate(model, data, iters=10):
    model.eval()
    losses = []
    for _ in range(iters):
        x, y = get_batch(data, BATCH_SIZE, BLOCK_SIZE)
        _, loss = model(x, y)
        losses.append(loss.item())
    model.train()
    return sum(losses) / len(losses)


def main():
    torch.manual_seed(1337)
    train_data, val_data, vocab_size = load_text("input.txt")
    model = TinyModel(vocab_size, n_embd=64, n_layer=2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    start = time.time()
    for step in range(MAX_STEPS):
        lr = get_lr(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, BATCH_SIZE, BLOCK_SIZE)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % EVAL_EVERY == 0:
            val = evaluate(model, val_data)
            print(f"step {step}: train {loss.item():.4f} val {val:.4f}")
    val = evaluate(model, val_data, iters=50)
    print("---")
    print(f"val_loss: {val:.4f}")
    print(f"train_time_s: {time.time() - start:.1f}")
    print(f"perplexity: {math.exp(val):.2f}")


if __name__ == "__main__":
    main()
