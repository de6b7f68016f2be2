"""The simulated ideator of bench/search_sim.py: a local OpenAI-compatible HTTP server whose "model"
reads the prompt it is sent and answers in the idea format, so the real provider, prompts and parser
are in the loop.

It knows the world's technique names and a weak prior about each (as a model knows the literature),
never the true effects. It can exploit only what the prompt shows: ideas named in `### <id>` blocks
with their `Result:` lines, the greedy lineage, and a `## Lessons` block. Without shown scores it
cannot rank what it sees; without shown failures it re-tries them. It re-proposes near-duplicates
(a rewording of a shown or earlier idea) at a rate that grows with every answer, as the paper's
ideators saturated. A prompt that asks it to condense a history into lessons gets a per-technique
summary of the results shown.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import search_world as W

_VERBS = ["Use", "Adopt", "Switch to", "Introduce", "Apply", "Try", "Add", "Replace the default with"]
_WHY = ["This should make optimization smoother and lower the final loss.",
        "The hypothesis is that it regularizes training and improves generalization.",
        "Recent work reports faster convergence with this change under a fixed budget.",
        "It targets a known bottleneck of the baseline and should reduce the loss.",
        "We expect a better use of the compute budget and a lower validation loss.",
        "A cheap change that often transfers across model sizes."]
_SYL = "ka lo mi ren tas vel dor ni sup bra gle fom tri wex zan".split()
_WORDS = re.compile(r"[a-z]+")
_RESULT = re.compile(r"Result: \S+ = ([-0-9.e+]*[0-9])")


class Ideator:
    """The model's behaviour for one world; `answer(messages)` -> text."""

    def __init__(self, world: W.World, seed: int = 0, prior_noise: float = 0.0):
        self.w = world
        self.rng = random.Random(f"ideator-{world.seed}-{seed}")
        # a weaker model knows the literature less well: its prior about each technique is noisier
        noise = random.Random(f"prior-{world.seed}-{seed}")
        self.prior = [p + noise.gauss(0, prior_noise) for p in world.prior] if prior_noise else world.prior
        self.calls = 0
        self.past: list[tuple[int, ...]] = []        # its own earlier proposals
        self._index = {n: i for i, n in enumerate(world.names)}
        # each technique is described in its own words, so two different ideas read differently
        # while a rewording of one idea keeps its technical words (what a dedupe can catch)
        vocab = [a + b for a in _SYL for b in _SYL]
        self.detail = [" ".join(self.rng.sample(vocab, 4)) for _ in world.names]

    # -- reading the prompt ---------------------------------------------------------------------
    def techs(self, text: str) -> list[int]:
        words = _WORDS.findall(text.lower())
        out = []
        for a, b in zip(words, words[1:]):
            t = self._index.get(f"{a} {b}")
            if t is not None and t not in out:
                out.append(t)
        return out

    def blocks(self, text: str) -> list[dict]:
        """The ideas shown: id, techniques, shown value (None when failed or not shown)."""
        out = []
        for part in re.split(r"\n(?=### )", text)[1:]:
            head, _, body = part.partition("\n")
            iid = head[4:].split(":")[0].strip()
            body = part.split("\n## ")[0]
            m = _RESULT.search(body)
            out.append({"id": iid, "techs": self.techs(body.split("Result:")[0]),
                        "value": float(m.group(1)) if m else None, "failed": "FAILED" in body})
        return out

    def lessons(self, text: str) -> tuple[set[int], set[int]]:
        sec = text.split("## Lessons", 1)
        if len(sec) < 2:
            return set(), set()
        body = sec[1].split("\n## ")[0]
        good, bad = set(), set()
        for line in body.splitlines():
            low = line.lower()
            if low.lstrip("- ").startswith("worked"):
                good |= set(self.techs(line))
            elif low.lstrip("- ").startswith(("failed", "hurt")):
                bad |= set(self.techs(line))
        return good, bad

    # -- writing ideas --------------------------------------------------------------------------
    def write(self, techs, cite: list[str] = ()) -> str:
        names = [self.w.names[t] for t in techs]
        joined = " together with ".join(f"{self.w.names[t]} ({self.detail[t]})" for t in techs)
        c = f" (builds on {', '.join(cite)})" if cite else ""
        return (f"[Experiment] {self.rng.choice(_VERBS)} {joined}{c}. {self.rng.choice(_WHY)}\n"
                f"[Code Changes] Edit train.py to implement {' and '.join(names)}.\n[End]")

    def pick_new(self, exclude: set[int], bonus: set[int] = frozenset()) -> int:
        cands = [t for t in range(len(self.w.names)) if t not in exclude]
        ws = [math.exp((self.prior[t] + (0.02 if t in bonus else 0)) / W.PRIOR_TEMP) for t in cands]
        return self.rng.choices(cands, ws)[0]

    def answer(self, messages: list[dict]) -> str:
        users = [m["content"] for m in messages if m["role"] == "user"]
        first, last = users[0], users[-1]
        if "SAME or DIFFERENT" in first:      # the novelty judge: same techniques = same experiment
            a, _, b = first.partition("Experiment B:")
            return "SAME" if set(self.techs(a.split("Experiment A:")[-1])) == set(self.techs(b)) else "DIFFERENT"
        if "Condense" in first and "lessons" in first.lower():
            return self.summarize(first)
        m = re.search(r"(?:write|Propose) (\d+)", last) or re.search(r"exactly (\d+)", first)
        n = int(m.group(1)) if m else 1
        self.calls += 1
        dup_p = min(W.DUP_START + W.DUP_PER_CALL * (self.calls - 1), W.DUP_MAX)
        shown = self.blocks(first)
        good, bad = self.lessons(first)
        avoid_sec = first.split("## Already proposed", 1)
        avoided = set()
        if len(avoid_sec) > 1:
            avoided = {tuple(sorted(self.techs(line))) for line in avoid_sec[1].split("\n## ")[0].splitlines()}
        base = re.search(r"baseline scores `[^`]+` = ([-0-9.e+]*[0-9])", first)
        bval = float(base.group(1)) if base else None
        hurt = {t for b in shown if b["failed"] or (bval is not None and b["value"] is not None
                                                    and b["value"] > bval) for t in b["techs"]} | bad
        tried = {t for b in shown for t in b["techs"]}
        ranked = sorted([b for b in shown if b["value"] is not None and b["techs"]], key=lambda b: b["value"])
        if "## Ideas that worked" in first and not ranked and shown:
            ranked = [b for b in shown if b["techs"]]            # no scores shown: no ranking either
            self.rng.shuffle(ranked)
        out = []
        for _ in range(n):
            pool = [b["techs"] for b in shown if b["techs"]] + self.past[-50:]
            if pool and self.rng.random() < dup_p:
                techs, cite = tuple(self.rng.choice(pool)), []      # a reworded earlier idea
            elif "## The current best" in first:
                cur = self.techs(first.split("## The current best", 1)[1].split("## Recent failures")[0])
                cur = cur[-W.MAX_TECHS:]
                if len(cur) >= W.MAX_TECHS:
                    cur = cur[1:]
                techs, cite = (self.pick_new(set(cur) | hurt, good),), []
            elif "## Ideas that worked" in first and ranked:
                top = ranked[:W.EXPLOIT_TOP]
                a = self.rng.choice(top)
                if len(top) > 1 and self.rng.random() < 0.5:
                    b = self.rng.choice([x for x in top if x is not a])
                    techs = tuple(dict.fromkeys(a["techs"] + b["techs"]))[:W.MAX_TECHS]
                    cite = [a["id"], b["id"]]
                elif len(a["techs"]) < W.MAX_TECHS:
                    techs, cite = (self.pick_new(set(a["techs"]) | hurt, good),), [a["id"]]
                else:
                    keep = self.rng.sample(a["techs"], W.MAX_TECHS - 1)
                    techs, cite = tuple(keep) + (self.pick_new(set(a["techs"]) | hurt, good),), []
            else:
                k = self.rng.choice((1, 1, 2))
                techs = tuple(self.pick_new(tried | hurt if tried else set(), good) for _ in range(k))
                cite = []
            if tuple(sorted(techs)) in avoided and self.rng.random() > dup_p:
                techs = (self.pick_new(set(techs) | hurt, good),)
                cite = []
            self.past.append(tuple(techs))
            out.append(self.write(list(dict.fromkeys(techs)), cite))
        return "\n\n".join(out)

    def summarize(self, prompt: str) -> str:
        """Per-technique mean shown delta to the baseline, over the results shown and the earlier
        lessons the prompt carries (only what the prompt shows): what worked, what failed or hurt."""
        base = re.search(r"baseline scores `[^`]+` = ([-0-9.e+]*[0-9])", prompt)
        bval = float(base.group(1)) if base else W.BASELINE
        stats: dict[int, list[float]] = {}
        failed: set[int] = set()
        prev = prompt.split("## Lessons so far", 1)
        if len(prev) > 1:
            for line in prev[1].split("\n## ")[0].splitlines():
                low = line.lower().lstrip("- ")
                if low.startswith("worked"):
                    for name, val in re.findall(r"([a-z]+ [a-z]+) \(([-+0-9.]+)\)", line):
                        if name in self._index:
                            stats.setdefault(self._index[name], []).append(float(val))
                elif low.startswith(("failed", "hurt")):
                    failed |= set(self.techs(line))
        for b in self.blocks(prompt):
            for t in b["techs"]:
                if b["failed"]:
                    failed.add(t)
                elif b["value"] is not None:
                    stats.setdefault(t, []).append(bval - b["value"])
        mean = {t: sum(v) / len(v) for t, v in stats.items()}
        good = sorted((t for t in mean if mean[t] > W.NOISE_SD), key=lambda t: -mean[t])[:12]
        bad = sorted((t for t in mean if mean[t] < -W.NOISE_SD), key=lambda t: mean[t])[:12]
        bad += sorted(failed - set(good) - set(bad))[:8]
        name = self.w.names
        return ("- Worked: " + ", ".join(f"{name[t]} ({mean[t]:+.3f})" for t in good) + "\n"
                "- Failed or hurt: " + ", ".join(name[t] for t in bad) + "\n")


class IdeatorServer:
    """`with IdeatorServer() as srv:` serves srv.ideator (set it per world) at srv.base_url."""

    def __init__(self):
        self.ideator: Ideator | None = None
        self.ideators: dict[str, Ideator] = {}     # per model name (an ensemble); else `ideator`
        self.requests = 0
        self.prompts: list[tuple[str, int]] = []    # (kind, prompt tokens) of every request
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"    # keep-alive: the SDK reuses its connection

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                try:
                    text = outer.ideators.get(body.get("model"), outer.ideator).answer(body["messages"])
                except Exception:       # a bug in the simulated model: say so, answer 500
                    traceback.print_exc()
                    self.send_error(500)
                    return
                outer.requests += 1
                inp = sum(len(m["content"]) for m in body["messages"]) // 4
                users = [m["content"] for m in body["messages"] if m["role"] == "user"]
                kind = "lessons" if "Condense" in users[0] else "novelty" if "SAME or DIFFERENT" in users[0] \
                    else "propose" if len(users) == 1 else "followup"
                outer.prompts.append((kind, inp))
                data = json.dumps({
                    "id": "sim-" + hashlib.sha1(text.encode()).hexdigest()[:8], "object": "chat.completion",
                    "created": 0, "model": body.get("model", "sim"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": inp, "completion_tokens": len(text) // 4,
                              "total_tokens": inp + len(text) // 4}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.base_url = f"http://127.0.0.1:{self._srv.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self._srv.shutdown()
        self._srv.server_close()
