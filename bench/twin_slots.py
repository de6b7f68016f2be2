"""Does a window and its causality twin (the same prefix, other tokens after the cut, other rows
around it) give bit-identical hidden states on this machine, in the same batch slot and in another?

nanogpt's scorer fails an evaluation when the twins' log-probabilities differ by over 1e-3 nats
(docs/env-nanogpt.md, "The causality check"). This trains the baseline's model 30 steps, exports it
as train.py does, runs it through eval_model.py's own functions on calls of 16 rows, and prints,
for 12 random twins each, whether the states agree to the bit and the largest log-probability
difference. On an H200: same slot 12/12 bitwise, another slot 11/12 (2.7e-4 nats).

    python bench/twin_slots.py [ENV_DIR (envs/nanogpt)] [WORK_DIR (a temporary folder)]
"""
import os
import sys
import tempfile
import time

import numpy as np
import torch

NG = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "envs", "nanogpt")
WORK = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="twin-slots-")
sys.path.insert(0, NG)
import eval_model  # noqa: E402
import make_synthetic_shards as ms  # noqa: E402
import train  # noqa: E402

t0 = time.time()
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
small = dev.type == "cpu"
h = train.Hyperparameters()
if small:
    h.n_layer, h.n_embd, h.n_head, h.seq_len = 2, 64, 4, 128   # a CPU smoke of the script itself
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True      # as eval_model.py runs the program
torch.backends.cudnn.allow_tf32 = True
model = train.GPT(h).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1.5e-3)
T, B = h.seq_len, 16
toks = ms.synthetic_tokens(200 * T + 1, 7).astype(np.int64)
X = toks[:200 * T].reshape(200, T)
ac = torch.autocast("cuda", dtype=torch.bfloat16) if not small else torch.autocast("cpu", enabled=False)
for step in range(30):            # move the weights off their init, as a short run would
    xb = torch.from_numpy(X[(step * 4) % 150:(step * 4) % 150 + 4]).to(dev)
    with ac:
        logits = model.lm_head(model.hidden(xb[:, :-1])).float()
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), xb[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"trained 30 steps, loss {loss.item():.3f}, {time.time()-t0:.1f}s", flush=True)
art, head = os.path.join(WORK, "out", "model.pt2"), os.path.join(WORK, "out", "head.npz")
train.save_artifact(model, h, dev, art, head)
prog, pdev = eval_model.load_model(art)
W = torch.from_numpy(np.load(head)["weight"]).float().to(dev)


def states(rows):
    """What eval_model.py writes for one call: float16 states."""
    return eval_model.hidden_of(prog, np.stack(rows).astype(np.uint16), pdev).to(torch.float16)


def lp(hs):
    """What the scorer compares: log-probabilities under the head."""
    return torch.log_softmax(hs.float() @ W.T, -1)


rng = np.random.default_rng(1)
res = {"same": [], "other": []}
bitwise = {"same": 0, "other": 0}
for trial in range(12):
    idx = rng.choice(200, size=2 * B + 1, replace=False)
    A = [X[i] for i in idx[:B]]
    others = [X[i] for i in idx[B:2 * B]]
    s, cut, donor = int(rng.integers(B)), int(rng.integers(1, T)), X[idx[-1]]
    twin = np.concatenate([A[s][:cut], donor[cut:]])
    ha = states(A)[s, :cut]
    for kind, slot in (("same", s), ("other", (s + 1 + int(rng.integers(B - 1))) % B)):
        rows = list(others)
        rows[slot] = twin
        hv = states(rows)[slot, :cut]
        eq = torch.equal(ha, hv)
        bitwise[kind] += eq
        d = (lp(ha) - lp(hv)).abs().max().item()
        res[kind].append(d)
        print(f"trial {trial} {kind:5s} slot {s}->{slot} cut {cut}: bitwise {eq}, "
              f"max|dh| {(ha.float()-hv.float()).abs().max().item():.3g}, max|dlogp| {d:.3g}", flush=True)
for k in res:
    print(f"{k}: bitwise equal {bitwise[k]}/12, max|dlogp| max {max(res[k]):.3g} median {np.median(res[k]):.3g}")
print(f"total {time.time()-t0:.1f}s")
