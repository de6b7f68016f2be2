"""Duplicate detection for proposed ideas: MinHash LSH finds candidates, rapidfuzz confirms them.

An idea is a duplicate of a stored one when their word sets are similar in size and content
(exact Jaccard >= `min_jaccard`) AND `rapidfuzz.fuzz.token_set_ratio` >= `threshold`. The Jaccard
guard matters: token_set_ratio alone scores 100 whenever one text's words are a subset of the
other's, so a short idea ("raise the learning rate") would "duplicate" every long idea that happens
to use those words. MinHash LSH over word shingles (unigrams by default, which are order-free like
token_set_ratio) retrieves the candidates in sub-linear time, so a query against 100k stored ideas
stays in the millisecond range.
"""

from __future__ import annotations

import re

from datasketch import MinHash, MinHashLSH
from datasketch.hashfunc import sha1_hash32
from rapidfuzz import fuzz

# Words that carry no idea: dropping them keeps unrelated ideas' word sets apart.
_STOP = frozenset("""
a an the and or of to in on for with by at from as is are be been being it its this that these those
we our us you your i will would should can could may might into than then so such via use using used
also both each all any more most less very just only not no do does did which while when where how
what who whom their there they them he she his her was were has have had if else but about over under
""".split())
_WORD = re.compile(r"[a-z0-9_]+(?:[.\-][a-z0-9_]+)*")
PENDING = "pending:"   # key prefix for proposals that are not ideas in git yet
_HASHES: dict[bytes, int] = {}   # word -> 32-bit hash: ideas share most words, so hash each once


def _word_hash(b: bytes) -> int:
    h = _HASHES.get(b)
    if h is None:
        if len(_HASHES) > 2_000_000:
            _HASHES.clear()
        h = _HASHES[b] = sha1_hash32(b)
    return h


def normalize(text: str) -> list[str]:
    """Lower-cased content words; numbers such as 3e-4 or 0.1 stay whole tokens."""
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def shingles(words: list[str], k: int = 1) -> set[str]:
    if k <= 1 or len(words) < k:
        return set(words)
    return {" ".join(words[i:i + k]) for i in range(len(words) - k + 1)}


def jaccard(a: set, b: set) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class DuplicateIndex:
    """find(text) -> id of a stored near-duplicate, or None; add(id, text) stores one more text.

    Keys starting with `pending:` name proposals that are not ideas in git yet; a real idea id is
    preferred over them when both match.
    """

    def __init__(self, threshold: float = 90.0, *, min_jaccard: float = 0.7, lsh_threshold: float = 0.6,
                 num_perm: int = 64, shingle: int = 1):
        self.threshold = float(threshold)
        self.min_jaccard = min_jaccard
        self.num_perm = num_perm
        self.shingle = shingle
        self._lsh = MinHashLSH(threshold=lsh_threshold, num_perm=num_perm)
        proto = MinHash(num_perm=num_perm)
        # Shared permutations: no per-text regeneration. datasketch >= 2 also wants their scheme.
        self._mh_kw = {"num_perm": num_perm, "permutations": proto.permutations, "hashfunc": _word_hash}
        scheme = getattr(proto, "scheme", None)         # a datasketch version probe: set from 2.0 on
        if scheme is not None:
            self._mh_kw["scheme"] = scheme
        self._texts: dict[str, str] = {}                         # key -> normalized text
        self._exact: dict[str, str] = {}                         # normalized text -> first key

    def __len__(self) -> int:
        return len(self._texts)

    def __contains__(self, key: str) -> bool:
        return key in self._texts

    def _minhash(self, sh: set[str]) -> MinHash:
        m = MinHash(**self._mh_kw)
        m.update_batch([s.encode() for s in sh])
        return m

    def add(self, key: str, text: str) -> None:
        self.add_many([(key, text)])

    def add_many(self, items: list[tuple[str, str]]) -> None:
        """Bulk insert (index build): one MinHash.bulk call and one LSH insertion session."""
        todo, seen = [], set()
        for key, text in items:
            if key in self._texts or key in seen:
                continue
            seen.add(key)
            words = normalize(text)
            norm = " ".join(words)
            self._texts[key] = norm
            self._exact.setdefault(norm, key)
            sh = shingles(words, self.shingle)
            if sh:
                todo.append((key, [s.encode() for s in sh]))
        if not todo:
            return
        hashes = MinHash.bulk([b for _, b in todo], **self._mh_kw)
        with self._lsh.insertion_session() as session:
            for (key, _), m in zip(todo, hashes):
                session.insert(key, m, check_duplication=False)

    def remove(self, key: str) -> None:
        norm = self._texts.pop(key, None)
        if norm is None:
            return
        if self._exact.get(norm) == key:
            del self._exact[norm]
        try:
            self._lsh.remove(key)
        except ValueError:
            pass  # a text with no words was never in the LSH

    def matches(self, text: str) -> list[tuple[str, float]]:
        """Every stored text that duplicates `text`, as (key, token_set_ratio), best first."""
        words = normalize(text)
        norm = " ".join(words)
        found: dict[str, float] = {}
        if norm in self._exact:
            found[self._exact[norm]] = 100.0
        sh = shingles(words, self.shingle)
        if sh:
            qset = set(words)
            for key in self._lsh.query(self._minhash(sh)):
                other = self._texts[key]
                if jaccard(qset, set(other.split())) < self.min_jaccard:
                    continue
                score = fuzz.token_set_ratio(norm, other)
                if score >= self.threshold:
                    found[key] = max(found.get(key, 0.0), score)
        return sorted(found.items(), key=lambda kv: (kv[0].startswith(PENDING), -kv[1], kv[0]))

    def find(self, text: str) -> str | None:
        m = self.matches(text)
        return m[0][0] if m else None

    def sync(self, population) -> int:
        """Add every idea of the population not indexed yet (any status, human ideas included).
        Returns how many were added; cheap when nothing is new."""
        new = [(i.idea_id, idea_text(i)) for i in population.ideas if i.idea_id not in self._texts]
        self.add_many(new)
        return len(new)


def idea_text(idea) -> str:
    """What an idea is compared on: its title and its full text."""
    return f"{idea.title}\n{idea.text}"

