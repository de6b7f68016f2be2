"""Prompt building shared by the policies, and the parser for the model's idea format.

Templates are Markdown files in `policies/prompts/` (package data, loaded with importlib.resources;
a `prompts_dir` given to the policy overrides them file by file) filled with `string.Template`
`${name}` placeholders. The model answers in blocks `[Experiment] ... [Code Changes] ... [End]`;
`parse_ideas` reads them whatever markdown, numbering, prose or line endings surround them.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from autoresearchd import defaults
from autoresearchd.goal import goal_word
from autoresearchd.store.ideas import prompt_hash
from autoresearchd.store.notes import Status


# -- templates ----------------------------------------------------------------------------------
def load_template(name: str, prompts_dir: str | Path | None = None) -> str:
    """The text of `<name>.md`: from prompts_dir when it has that file, else the packaged one."""
    if prompts_dir is not None:
        p = Path(prompts_dir) / f"{name}.md"
        if p.is_file():
            return p.read_text()
    return resources.files("autoresearchd.policies").joinpath("prompts", f"{name}.md").read_text()


def render(template: str, **values) -> str:
    """Fill `${name}` placeholders; a missing value is an error naming it."""
    try:
        return string.Template(template).substitute(**{k: str(v) for k, v in values.items()})
    except KeyError as e:
        raise KeyError(f"prompt template needs a value for ${{{e.args[0]}}}") from None


# -- the idea format ------------------------------------------------------------------------------
@dataclass
class ParsedIdea:
    title: str
    experiment: str
    code_changes: str

    @property
    def text(self) -> str:
        """The canonical full text the implementer reads."""
        t = f"[Experiment] {self.experiment}"
        return t + (f"\n[Code Changes] {self.code_changes}" if self.code_changes else "")


# A tag in brackets, optionally wrapped in markdown emphasis and followed by a colon.
_DECOR = r"[*_`#>\s]*"
_TAG = re.compile(_DECOR + r"\[\s*(experiment|code[ _-]*changes?|end)\s*\]\s*[*_`]*\s*:?", re.I)
# Leftovers between blocks: numbering, "Idea 3:", headers, rules, emphasis markers.
_JUNK_LINE = re.compile(r"^\s*(?:#+\s*)?(?:[*_]{1,3})?\s*(?:(?:idea|experiment)\s*#?\s*\d+\s*[:.)-]?|"
                        r"\d+\s*[.)]|[-*_=]{3,})?\s*(?:[*_]{1,3})?\s*$", re.I)
_LEAD_NUM = re.compile(r"^\s*(?:#+\s*)?(?:[*_]{1,3})?\s*(?:(?:idea|experiment)\s*#?\s*\d+\s*[:.)-]|"
                       r"\d+\s*[.)])\s*", re.I)


def _clean(part: str) -> str:
    """Strip blank, numbering-only and separator lines from both ends of a section."""
    lines = part.strip().split("\n")
    while lines and _JUNK_LINE.match(lines[-1]):
        lines.pop()
    while lines and _JUNK_LINE.match(lines[0]):
        lines.pop(0)
    return "\n".join(line.rstrip() for line in lines).strip()


def make_title(experiment: str, maxlen: int = 120) -> str:
    """The first line of the experiment, cut to its first sentence when long, without markdown."""
    first = next((ln for ln in experiment.split("\n") if ln.strip()), "").strip()
    first = _LEAD_NUM.sub("", first)
    bold = re.match(r"^\s*(\*\*|__)(.+?)\1\s*[:.\-–—]?", first)
    if bold and len(bold.group(2).strip()) >= 4:
        first = bold.group(2)
    # markdown emphasis goes; an underscore inside a word (use_flash_attn) is part of the title
    first = re.sub(r"[*`#]+|(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", first).strip(" :-–—")
    # First sentence: a full stop followed by a capital (so "0.1" or "e.g. x" do not end it).
    m = re.match(r"(.{6,}?[.!?])\s+(?=[A-Z(\[])", first)
    if m:
        first = m.group(1)
    elif len(first) > maxlen:
        m = re.match(r"(.{20,}?[;:])(\s|$)", first)
        first = m.group(1) if m and len(m.group(1)) <= maxlen else first
    first = first.rstrip(".;: ")
    if len(first) > maxlen:
        first = first[:maxlen].rsplit(" ", 1)[0] + "…"
    return " ".join(first.split()) or "untitled idea"


def parse_ideas(text: str) -> list[ParsedIdea]:
    """Every `[Experiment] ... [Code Changes] ... [End]` block of a model answer, in order.

    Tolerates markdown around the tags, numbering, prose before/after, a missing [End] and CRLF.
    A block with an empty experiment is skipped; one without [Code Changes] keeps an empty summary.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    tags = [(m.start(), m.end(), m.group(1).lower()) for m in _TAG.finditer(text)]
    ideas: list[ParsedIdea] = []
    for k, (_, end, kind) in enumerate(tags):
        if kind != "experiment":
            continue
        # The block runs to the next [Experiment] or [End], whichever comes first.
        stop, code_at = len(text), None
        for start2, end2, kind2 in tags[k + 1:]:
            if kind2 in ("experiment", "end"):
                stop = start2
                break
            if code_at is None:
                code_at = (start2, end2)
        if code_at:
            exp, code = text[end:code_at[0]], text[code_at[1]:stop]
        else:
            exp, code = text[end:stop], ""
        exp, code = _clean(exp), _clean(code)
        if stop == len(text):  # no [End]: the model's closing words may have run into the block
            if code:
                code = _strip_tail(code)
            else:
                exp = _strip_tail(exp)
        if exp:
            ideas.append(ParsedIdea(make_title(exp), exp, code))
    return ideas


_SIGN_OFF = re.compile(r"^\s*(let me know|i hope|hope (this|these)|these (experiments|ideas)|feel free|good luck|"
                       r"happy to|each of these|all of these|in summary|overall,)", re.I)


def _strip_tail(s: str) -> str:
    """Drop a closing code fence and a one-paragraph sign-off after the last block."""
    s = re.sub(r"\n?```\s*$", "", s).strip()
    head, sep, last = s.rpartition("\n\n")
    if sep and _SIGN_OFF.match(last):
        s = head.strip()
    return _clean(s)


# -- describing the population to the model ----------------------------------------------------
def fmt_num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.4g}" if abs(v) >= 1e4 or (v != 0 and abs(v) < 1e-3) else f"{v:.4f}"


def goal_words(goal: str) -> str:
    return f"{goal_word(goal)} is better"


def result_line(idea, population, env) -> str:
    """One line: the measured value with its delta, or the failure and its reason."""
    n = idea.note
    if n is None:
        return "Result: not measured yet"
    if n.status == Status.SUCCEEDED and n.value is not None:
        s = f"Result: {env.metric} = {fmt_num(n.value)}"
        if len(n.values) > 1 and n.std is not None:
            s += f" ± {fmt_num(n.std)} over {len(n.values)} seeds"
        old = population.stale(idea)       # measured against an old baseline: compared with that one
        base = n.baseline if old else population.baseline_value
        if base is None:
            base = n.baseline
        if base is not None:
            d = n.value - base
            verdict = "better" if env.better(n.value, base) else ("same" if d == 0 else "worse")
            which = "an old baseline (before the baseline moved)" if old else "baseline"
            s += f" ({d:+.4g} vs {which} {fmt_num(base)}: {verdict})"
        if n.decision:
            s += f" [{n.decision}]"
        return s
    reason = (n.error or "").strip()
    if not reason and n.exit_code is not None:
        reason = f"exit code {n.exit_code}"
    if n.status == Status.DUPLICATE and n.duplicate_of:
        reason = f"duplicate of {n.duplicate_of}"
    reason = " ".join(reason.split())[:defaults.PROMPT_MAX_ERROR_CHARS]
    return f"Result: FAILED ({n.status.value})" + (f": {reason}" if reason else "")


def describe_idea(idea, population, env, max_chars: int = defaults.PROMPT_MAX_IDEA_CHARS) -> str:
    body = idea.text.strip()
    if body.startswith(idea.title):
        body = body[len(idea.title):].strip()
    if len(body) > max_chars:
        body = body[:max_chars].rsplit(" ", 1)[0] + " […]"
    # The title goes in the heading unless the body opens with it anyway.
    opens_with_title = idea.title and idea.title in body[:len(idea.title) + 20]
    head = f"### {idea.idea_id}" + ("" if opens_with_title else f": {idea.title}")
    return "\n".join(x for x in (head, body, result_line(idea, population, env)) if x)


def describe_ideas(ideas, population, env) -> str:
    return "\n\n".join(describe_idea(i, population, env) for i in ideas) or "(none)"


def history(population) -> list:
    """Every idea with a final result, failures included (duplicates say nothing new)."""
    return sorted((i for i in population.ideas if i.note is not None and i.status != Status.DUPLICATE),
                  key=lambda i: i.idea_id)


class Listing:
    """Entries of a prompt section (described ideas, titles) that may be cut to fit the prompt's token
    budget: `render(max_chars)` keeps whole entries, the first ones (or the last, keep="last") first,
    and says how many were left out. `wrap` turns the kept body into the section (or "" when empty)."""

    def __init__(self, entries: list[str], sep: str = "\n\n", empty: str = "(none)", keep: str = "first",
                 wrap=None):
        self.entries, self.sep, self.empty, self.keep = list(entries), sep, empty, keep
        self.wrap = wrap or (lambda body: body)

    @classmethod
    def ideas(cls, ideas, population, env, **kw) -> "Listing":
        return cls([describe_idea(i, population, env) for i in ideas], **kw)

    def render(self, max_chars: int | None = None) -> str:
        if max_chars is not None:
            max_chars -= len(self.wrap(""))
            if len(self.sep.join(self.entries)) > max_chars:
                max_chars -= 48           # room for the "(N more not shown: prompt budget)" line
        order = self.entries if self.keep == "first" else self.entries[::-1]
        kept, used = [], 0
        for e in order:
            if max_chars is not None and used + len(e) + len(self.sep) > max_chars:
                break
            kept.append(e)
            used += len(e) + len(self.sep)
        if self.keep == "last":
            kept.reverse()
        left = len(self.entries) - len(kept)
        if not self.entries:
            return self.wrap(self.empty) if self.empty else ""
        if not left:
            return self.wrap(self.sep.join(kept))
        more = ("earlier " if self.keep == "last" else "more ") if kept else ""
        note = f"({left} {more}not shown: prompt budget)"
        return self.wrap(self.sep.join([note] + kept if self.keep == "last" else kept + [note]))


def baseline_line(population, env) -> str:
    b = population.baseline_value
    if b is None:
        return "The unmodified baseline has not been measured yet."
    s = f"The unmodified baseline scores `{env.metric}` = {fmt_num(b)}"
    if population.baseline_std:
        s += f" (± {fmt_num(population.baseline_std)} across seeds)"
    return s + "."


def human_duration(s: int) -> str:
    return f"{s / 3600:.3g} h" if s >= 3600 else (f"{s / 60:.3g} min" if s >= 60 else f"{s} s")


def avoid_titles(titles: list[str]) -> str:
    """A bullet list of titles (the newest defaults.PROMPT_MAX_AVOID_TITLES), deduplicated."""
    uniq = list(dict.fromkeys(t for t in titles if t))
    uniq = uniq[-defaults.PROMPT_MAX_AVOID_TITLES:]
    return "\n".join(f"- {t}" for t in uniq)


class Prompts:
    """Loads a policy's templates (overridable per file) and renders the shared blocks."""

    def __init__(self, prompts_dir: str | Path | None = None, token_budget: int | None = None, tuning=None,
                 lessons: Callable[[], str] | None = None):
        self.prompts_dir = prompts_dir
        self._cache: dict[str, str] = {}
        self.token_budget = token_budget      # prompt size cap (policy.prompt_token_budget); None: none
        # () -> the lessons scratchpad's text as kept now (policies/lessons.py), when the policy shows it
        self.lessons = lessons
        # (population, env) -> the tuning section (daemon/tune/surface.py's prompt_block), with [tune] on
        self.tuning = tuning

    def get(self, name: str) -> str:
        if name not in self._cache:
            self._cache[name] = load_template(name, self.prompts_dir)
        return self._cache[name]

    def hash(self, *names: str) -> str:
        return prompt_hash(*(self.get(n) for n in names))

    def system(self) -> str:
        return self.get("system").strip()

    def task(self, population, env, with_baseline: bool = True) -> str:
        context = (env.context or env.description or
                   "Improve the training code in this repository.").strip()
        return render(self.get("task"), context=context, metric=env.metric, goal_words=goal_words(env.goal),
                      time_budget_s=env.time_budget_s, time_budget_human=human_duration(env.time_budget_s),
                      baseline_line=baseline_line(population, env) if with_baseline else
                      "Results are compared with the unmodified code (the baseline).").strip()

    def format(self, n: int) -> str:
        return render(self.get("format"), n=n).strip()

    def avoid(self, titles: list[str]) -> Listing:
        block = avoid_titles(titles)
        return Listing(block.split("\n") if block else [], sep="\n", empty="", keep="last",
                       wrap=lambda body: render(self.get("avoid"), titles=body).rstrip() + "\n")

    def lessons_block(self, population, env) -> str:
        text = self.tuning(population, env).strip() if self.tuning is not None else ""
        tuning = ("\n" + text + "\n") if text else ""
        lessons = self.lessons().strip() if self.lessons is not None else ""
        if not lessons:
            return tuning
        return ("## Lessons from earlier results\n\nWhat all results so far taught, including those "
                "not shown here:\n\n" + lessons + "\n") + tuning

    def page(self, name: str, population, env, n: int, with_baseline: bool = True, **values) -> str:
        """A full user prompt: template `name` with the task and format blocks filled in. Values that
        are Listings are cut to fit `token_budget`: what the fixed text leaves is shared out equally,
        and what one Listing does not need goes to the others."""
        values.setdefault("avoid", "")
        if "lessons" not in values:         # not setdefault: the block reads git, and a caller's "" needs none
            values["lessons"] = self.lessons_block(population, env)
        lists = {k: v for k, v in values.items() if isinstance(v, Listing)}

        def fill(texts: dict) -> str:
            text = render(self.get(name), task=self.task(population, env, with_baseline),
                          format=self.format(n), n=n, metric=env.metric, **{**values, **texts})
            return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"

        if self.token_budget is None or not lists:
            return fill({k: v.render() for k, v in lists.items()})
        left = self.token_budget * defaults.CHARS_PER_TOKEN - len(fill({k: "" for k in lists}))
        texts = {}
        todo = sorted(lists, key=lambda k: len(lists[k].render()))    # the smallest take what they need
        for j, k in enumerate(todo):
            texts[k] = lists[k].render(max(0, left // (len(todo) - j)))
            left -= len(texts[k])
        return fill(texts)
