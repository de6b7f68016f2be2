"""The `replay` provider: serves recorded ideas and diffs from a file instead of asking a model.

It makes the daemon run offline (the demo, CI, a published trajectory re-run). The file is JSONL,
one idea per line (a JSON array, or an object holding one under "records"/"ideas"/"trajectory",
is read too):

    {"title": str?, "idea": str, "code_diff": str, "revisions": [str]?, "epoch": int?, "result": any?}

Key aliases are accepted ("text" for idea, "diff"/"patch" for code_diff, ...), so the daemon's own
trajectory export reads back. What is served depends on meta["purpose"] (see Provider.complete):
- "propose": the next meta["n"] unserved records as [Experiment] ... [Code Changes] ... [End]
  blocks. Records whose title is in meta["known_titles"] (or "skip_titles") are skipped, and the
  daemon restores the served records from git (`resume`, daemon/store/replaypos.py), so a restarted
  daemon resumes where it was. None left: ReplayExhausted.
- "implement" / "revise": the recorded diff of the idea named by meta["idea"]; attempt k > 1 gets
  revisions[k-2] (or the last response there is). An unknown idea gets a reply with no diff.
Completions cost nothing; tokens are estimated as characters / 4.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import Completion, LLMError, Provider, ReplayExhausted

log = logging.getLogger(__name__)

_IDEA_KEYS = ("idea", "text", "idea_text", "proposal", "description", "message")
_TITLE_KEYS = ("title", "name", "idea_title")
_CODE_KEYS = ("code_diff", "diff", "patch", "code", "implementation")
_REVISION_KEYS = ("revisions", "revision_diffs", "code_revisions")
_LIST_KEYS = ("records", "ideas", "trajectory", "data")
_EXPERIMENT = re.compile(r"^\s*[#*\s]*\[experiment\][*\s:]*(.*)$", re.I)


@dataclass
class Record:
    title: str
    idea: str
    code_diff: str | None = None
    revisions: tuple[str, ...] = ()
    epoch: int | None = None
    result: Any = None

    @property
    def responses(self) -> list[str]:
        """The implementer's answers in attempt order: the first diff, then each revision."""
        return [r for r in (self.code_diff, *self.revisions) if isinstance(r, str) and r.strip()]


def norm(text: str) -> str:
    """Case, punctuation and whitespace insensitive form of a title, for matching."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.casefold()).split())


def title_of(text: str) -> str:
    """The title of an idea text: its [Experiment] line (or the line after a bare one), else the
    first non-empty line, without markdown decoration."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        m = _EXPERIMENT.match(ln)
        if m:
            t = m.group(1) or (lines[i + 1] if i + 1 < len(lines) else "")
            return t.strip(" #*").strip()[:200]
    return lines[0].strip(" #*").strip()[:200] if lines else ""


def _first_str(d: dict, keys: tuple[str, ...]) -> str | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, str) and v.strip():
            return v
    return None


def to_record(d: Any) -> Record | None:
    """One JSON object as a Record, tolerant of key names; None when it holds no idea."""
    if not isinstance(d, dict):
        return None
    if isinstance(d.get("idea"), dict):  # {"idea": {"title": ..., "text": ...}, "code_diff": ...}
        d = {**d["idea"], **{k: v for k, v in d.items() if k != "idea"}}
    idea, title = _first_str(d, _IDEA_KEYS), _first_str(d, _TITLE_KEYS)
    if not (idea or title):
        return None
    idea = idea or title or ""
    title = (title or title_of(idea)).strip()
    code = next((d[k] for k in _CODE_KEYS if d.get(k)), None)
    revisions = next((d[k] for k in _REVISION_KEYS if isinstance(d.get(k), list)), [])
    if isinstance(code, list):  # a list of attempts: the first is the diff, the rest revisions
        code, revisions = (code[0] if code else None), [*code[1:], *revisions]
    epoch = d.get("epoch")
    return Record(title=title, idea=idea, code_diff=code if isinstance(code, str) else None,
                  revisions=tuple(r for r in revisions if isinstance(r, str)),
                  epoch=epoch if isinstance(epoch, int) else None, result=d.get("result"))


def load_records(path: Path) -> list[Record]:
    """Read a replay file. Malformed lines are skipped with a warning (a trajectory export cut
    short by a crash still replays); identical repeated ideas are kept once."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise LLMError(f"replay file {path} cannot be read ({e.strerror}); set llm.replay_file "
                       f"to a JSONL file of recorded ideas") from None
    try:  # a JSON array, or one object (a single record, or one holding the list)
        whole = json.loads(text)
    except ValueError:
        whole = None  # JSONL: parsed line by line below
    items: list[Any] = []
    if isinstance(whole, list):
        items = whole
    elif isinstance(whole, dict):
        held = [whole[k] for k in _LIST_KEYS if isinstance(whole.get(k), list)]
        items = held[0] if held and not _first_str(whole, _IDEA_KEYS) else [whole]
    if whole is None:
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except ValueError as e:
                    log.warning("%s:%d: skipped, not JSON (%s)", path, n, e)
    out, seen = [], set()
    for item in items:
        rec = to_record(item)
        if rec is not None and (norm(rec.title), rec.idea) not in seen:
            seen.add((norm(rec.title), rec.idea))
            out.append(rec)
    if not out:
        raise LLMError(f"replay file {path} holds no recorded ideas: each line must be a JSON "
                       f"object with an \"idea\" (and a \"code_diff\"); see docs/llm.md")
    return out


def format_idea(rec: Record) -> str:
    """A record as the block the policies parse: [Experiment] title ... [Code Changes] ... [End]."""
    text = rec.idea.strip()
    if "[code changes]" in text.casefold():
        if not any(_EXPERIMENT.match(ln) for ln in text.splitlines()):
            text = f"[Experiment] {rec.title}\n{text}"
        return text if text.endswith("[End]") else f"{text}\n[End]"
    lines = text.splitlines()
    while lines and (not lines[0].strip() or _EXPERIMENT.match(lines[0])
                     or norm(lines[0]) == norm(rec.title)):
        lines.pop(0)
    body = "\n".join(lines).strip() or rec.title
    files = sorted(set(re.findall(r"^\+\+\+ (?:b/)?(\S+)", rec.code_diff or "", re.M)) - {"/dev/null"})
    changes = f"Edit {', '.join(files)} as described above." if files else "As described above."
    return f"[Experiment] {rec.title}\n{body}\n[Code Changes] {changes}\n[End]"


def _as_answer(code: str) -> str:
    """A recorded implementation as the implementer's answer: verbatim if it is already fenced."""
    return code if "```" in code else f"```diff\n{code.rstrip()}\n```"


class ReplayProvider(Provider):
    name = "replay"

    def __init__(self, cfg, budget=None, path: str | Path | None = None, on_served=None):
        super().__init__(cfg, budget)
        p = path or cfg.replay_file
        if not p:
            raise LLMError("the replay provider needs a file of recorded ideas: set llm.replay_file "
                           "(or set ANTHROPIC_API_KEY / OPENAI_API_KEY to use a live model)")
        self.path = Path(p).expanduser()
        self.records = load_records(self.path)
        self.model = f"replay:{self.path.name}"
        self._served: set[int] = set()
        self._lock = threading.Lock()
        self.on_served = on_served    # callback(sorted served indices): the daemon keeps the position in git

    def resume(self, served: set[int]) -> None:
        """Continue after the records an earlier run served (its position, read back from git)."""
        with self._lock:
            self._served |= {i for i in served if 0 <= i < len(self.records)}

    def default_model(self) -> str:
        return "replay"

    def __repr__(self) -> str:
        return f"ReplayProvider(path={str(self.path)!r}, records={len(self.records)})"

    def remaining(self, known_titles=()) -> int:
        known = {norm(t) for t in known_titles}
        return sum(1 for i, r in enumerate(self.records) if i not in self._served and norm(r.title) not in known)

    def _propose(self, meta: dict) -> str:
        n = max(1, int(meta.get("n") or 1))
        known = {norm(t) for t in (*meta.get("known_titles", ()), *meta.get("skip_titles", ())) if t}
        with self._lock:
            picked = [i for i, r in enumerate(self.records)
                      if i not in self._served and norm(r.title) not in known][:n]
            if not picked:
                raise ReplayExhausted(f"replay file exhausted: all {len(self.records)} recorded ideas "
                                      f"were served ({self.path.name})")
            self._served.update(picked)
            served = sorted(self._served)
        if self.on_served is not None:
            self.on_served(served)
        return "\n\n".join(format_idea(self.records[i]) for i in picked)

    def find(self, key: str) -> Record | None:
        """The record an idea title (or idea text) names: exact, then normalised, then the longest
        recorded title contained in it."""
        key = key.strip()
        for r in self.records:
            if key in (r.title, title_of(r.idea)):
                return r
        nk, nt = norm(key), norm(title_of(key))
        for r in self.records:
            if norm(r.title) in (nk, nt):
                return r
        hits = [r for r in self.records if norm(r.title) and f" {norm(r.title)} " in f" {nk} "]
        return max(hits, key=lambda r: len(r.title)) if hits else None

    def _implement(self, meta: dict, messages: list[dict]) -> str:
        key = meta.get("idea") or meta.get("title") or _flatten(messages)
        rec = self.find(str(key))
        if rec is None:
            return (f"replay: {self.path.name} has no recorded implementation of this idea, "
                    f"so there is no change to apply.")
        responses = rec.responses
        if not responses:
            return f"replay: the record of '{rec.title}' holds no code, so there is no change to apply."
        attempt = max(1, int(meta.get("attempt") or 1))
        return _as_answer(responses[min(attempt, len(responses)) - 1])

    def _call(self, messages: list[dict], system: str | None, max_tokens: int, meta: dict) -> Completion:
        purpose = meta.get("purpose")
        if purpose == "propose":
            text = self._propose(meta)
        elif purpose in ("implement", "revise"):
            text = self._implement(meta, messages)
        else:
            text = f"replay: no recorded response for purpose '{purpose}'."
        prompt = (system or "") + _flatten(messages)
        return Completion(text=text, model=self.model, input_tokens=len(prompt) // 4,
                          output_tokens=len(text) // 4, cost_usd=0.0, stop_reason="end_turn")


def _flatten(messages: list[dict]) -> str:
    """All message text, whether content is a string or a list of blocks."""
    parts = []
    for m in messages:
        c = m.get("content", "")
        parts += [c] if isinstance(c, str) else [b.get("text", "") if isinstance(b, dict) else str(b) for b in c]
    return "\n".join(parts)
