"""`autoresearchd export`: the population as trajectories, one record per idea, in the shape of the
paper's published trajectories (`idea`, `code_diff`, `epoch`, `result`) plus our provenance.

Each record:
  idea       the full idea text (title, blank line, body), as the ideator wrote it
  code_diff  the idea commit's diff against its first parent (a pushed idea: against its nearest
             measured ancestor or its merge-base with the baseline, store/diffbase.py); for an idea that was never
             implemented, the first diff the implementer tried (from its transcript)
  revisions  for such an idea, the diffs of the later attempts (the replay provider serves them)
  epoch, result (the metric value, null when the idea produced none)
  idea_id, title, origin, parents, status, decision, metric, goal, seeds, values (per seed), std,
  baseline, delta, error, cost {tokens, usd}, gpu_s, cpu_s (totals over the seeds, docs/notes.md
  "Compute fields"), branch, commit,
  and what the delta is against: baseline_commit, stale (measured against an old baseline), delta_kind
  (paired by seed, or vs baseline mean), delta_mean, deltas_differ, delta_text, decision_text
The replay provider (llm.provider = "replay") reads an export back as its file of recorded ideas.
Everything is read in a fixed number of git processes: one diff-tree for all diffs, one batch for
the transcripts.
"""

from __future__ import annotations

import json
from pathlib import Path

from autoresearchd.config import ConfigError
from autoresearchd.store.diffbase import diff_base, is_pushed
from autoresearchd.store.refs import branch_name
from autoresearchd.views.summary import idea_tokens, idea_usd, load
from autoresearchd.views.versus import baseline_running, versus

FORMATS = ("jsonl", "parquet")


def _transcripts(repo, ideas) -> dict[str, list]:
    """idea id -> its implementer attempts, for ideas that never became a branch."""
    want = {i.idea_id: i.trailers.transcript or (i.note.log if i.note else None)
            for i in ideas if not i.branch}
    blobs = repo.cat_file_batch([s for s in want.values() if s])
    out = {}
    for idea_id, sha in want.items():
        try:
            data = json.loads(blobs[sha]) if sha in blobs else []
        except ValueError:
            data = []
        out[idea_id] = data if isinstance(data, list) else []
    return out


def records(cfg) -> list[dict]:
    research, pop = load(cfg)
    repo, m = research.repo, research.manifest
    diffs = repo.diffs_first_parent([i.commit for i in pop.ideas if i.commit and i.branch and not is_pushed(i)])
    for i in pop.ideas:      # a pushed idea: its whole change, as the gate checked it (store/diffbase.py)
        if i.commit and i.branch and is_pushed(i):
            base = diff_base(repo, i, pop.baseline_commit, pop.by_commit.__contains__)
            diffs[i.commit] = repo.diff(base, i.commit) if base else ""
    attempts = _transcripts(repo, pop.ideas)
    waiting = baseline_running(pop, (pop.baseline_note.seeds_planned if pop.baseline_note else None)
                               or cfg.policy.baseline_seeds)
    out = []
    for i in pop.ideas:
        n = i.note
        text = i.text if i.text.strip() == i.title.strip() else f"{i.title}\n\n{i.text}"
        code, revisions = (diffs.get(i.commit, "") if i.branch else None), []
        if not i.branch:
            tried = [a.get("diff") for a in attempts.get(i.idea_id, []) if isinstance(a, dict) and a.get("diff")]
            code, revisions = (tried[0], tried[1:]) if tried else (None, [])
        rec = {"idea": text, "code_diff": code, "epoch": i.epoch, "result": i.value,
               "idea_id": i.idea_id, "title": i.title, "origin": i.origin, "parents": i.parents,
               "status": i.status.value, "decision": n.decision if n else None, "metric": m.metric,
               "goal": m.goal, "seeds": n.seeds if n else [], "values": n.values if n else [],
               "std": n.std if n and i.value is not None else None,
               "baseline": n.baseline if n else None, "delta": n.delta if n else None,
               "error": n.error if n else None,
               "cost": {"tokens": idea_tokens(i), "usd": idea_usd(i)},
               "gpu_s": n.gpu_s if n else None, "cpu_s": n.cpu_s if n else None,
               "branch": branch_name(i.branch) or None, "commit": i.commit}
        # what the delta is and against which baseline: baseline_commit, stale, delta_kind, delta_mean,
        # deltas_differ, delta_text, decision_text (views/versus.py)
        rec.update({k: v for k, v in versus(i, pop, waiting).items() if k != "baseline"})
        if revisions:
            rec["revisions"] = revisions
        out.append(rec)
    return out


def export(cfg, out_path, fmt: str = "jsonl") -> int:
    """Write the population to out_path as JSONL or Parquet; return the number of ideas written."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format '{fmt}'; valid: {', '.join(FORMATS)}")
    recs = records(cfg)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        try:    # lazy: pyarrow is optional, needed by --format parquet alone
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError("export --format parquet needs pyarrow (pip install pyarrow); "
                              "--format jsonl needs nothing") from None
        for r in recs:
            r.setdefault("revisions", [])
        pq.write_table(pa.Table.from_pylist(recs), out)
        return len(recs)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(out)
    return len(recs)
