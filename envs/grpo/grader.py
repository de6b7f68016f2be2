"""Frozen grader: the r1-zero format check and MATH answer equivalence via math-verify.

A response earns reward 1 only if it is in r1-zero format (it contains "</think> <answer>" and
"</answer>") and the text inside the last <answer> tag (unboxed if it holds \\boxed{...}) is
equivalent to the gold answer. Equivalence: identical after light normalisation, else
`math_verify.verify(parse(gold), parse(answer))`, gold first. math-verify times its work out with
signal.alarm, which works only in the main thread; elsewhere its timeouts are switched off.
"""

from __future__ import annotations

import re
import threading

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

FORMAT_OPEN = "</think> <answer>"
ANSWER_CLOSE = "</answer>"


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in text, braces balanced; None if absent."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    open_at = text.find("{", start)
    if open_at < 0:
        return None
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1:i]
    return None


_SPACES = re.compile(r"\s+")
_TEXT = re.compile(r"^\\text\{(.*)\}$")


def normalize(ans: str) -> str:
    """Cheap canonical form, so exact matches skip the (slow) symbolic check."""
    s = ans.strip().replace("\\$", "").strip("$").strip()
    m = _TEXT.match(s)
    if m:
        s = m.group(1)
    for a, b in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""), ("\\right", ""),
                 ("\\!", ""), ("\\,", ""), ("\\;", ""), ("^\\circ", ""), ("^{\\circ}", "")):
        s = s.replace(a, b)
    s = _SPACES.sub("", s)
    if s.endswith("."):
        s = s[:-1]
    return s.lower()


_CONFIG = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


def _wrap(ans: str) -> str:
    ans = ans.replace("\\$", "")   # a dollar *sign* (\\$36) would read as math-mode delimiters
    return ans if "$" in ans or "\\boxed" in ans else f"${ans}$"


def is_equivalent(answer: str | None, gold: str) -> bool:
    """True if answer equals gold (a MATH answer string) exactly or symbolically."""
    if answer is None or not answer.strip():
        return False
    if normalize(answer) == normalize(gold):
        return True
    main = threading.current_thread() is threading.main_thread()
    limits = {} if main else {"parsing_timeout": None}
    try:
        g = parse(_wrap(gold), extraction_config=_CONFIG, **limits)
        a = parse(_wrap(answer), extraction_config=_CONFIG, **limits)
        if not g or not a:
            return False
        return bool(verify(g, a, **({} if main else {"timeout_seconds": None})))
    except Exception:  # a parser crash on a malformed answer is a wrong answer, not a failed run
        return False


def extract_answer(response: str) -> str | None:
    """The model's final answer: the text in its last <answer> tag, unboxed if it is boxed."""
    inner = response.split("<answer>")[-1].replace(ANSWER_CLOSE, "")
    if "\\boxed" in inner or "\\fbox" in inner:
        return last_boxed(inner)
    return inner.strip()


def r1_zero_reward(response: str, gold: str) -> dict[str, float]:
    """{'format_reward', 'answer_reward', 'reward'}; a formatted wrong answer earns 0 reward."""
    if FORMAT_OPEN not in response or ANSWER_CLOSE not in response:
        return {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}
    ok = is_equivalent(extract_answer(response), str(gold))
    return {"format_reward": 1.0, "answer_reward": float(ok), "reward": float(ok)}
