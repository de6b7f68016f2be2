"""Scripted ideas through each implementer end to end: how many multi-file and check-failing ideas
land as branches, and whether a change to a frozen file is refused. A helper of bench/apply_rate.py.

The same "model" behaviour is scripted for every implementer: a list of attempts, each a set of
whole files. The diff implementer receives each attempt as a unified diff from a local
OpenAI-compatible server (tests/fake_llm.py) and revises after a failed check up to
`implementer.max_revisions` (default 2) times. The agent CLIs (real `claude` / `codex` binaries)
receive each attempt as tool calls from a local server (tests/fake_agent_api.py): write the files,
run `autoresearch-check`, and after the last attempt finish; their loop is bounded by the session's
turns, wall time and USD cap instead. What this measures is the mechanics (which loop gets to try
the attempts, and the gates), not how good a model is.
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
import time
from pathlib import Path

from autoresearchd.app import make_llm
from autoresearchd.makelifecycle import make_lifecycle
from autoresearchd.config import load_config
from autoresearchd.implement.implementer import make_implementer
from autoresearchd.policies.base import Proposal
from autoresearchd.research import open_research
from autoresearchd.store.gitrepo import GitRepo
from fake_agent_api import Done, FakeAgentAPI, Shell, Write
from fake_llm import FakeLLM, Reply

MANIFEST = """[env]
name = "bench"
run = "python3 run.py"
evaluate = "python3 evaluate.py"
check = "python3 run.py"
metric = "score"
goal = "min"
time_budget_s = 30
frozen = ["evaluate.py"]
artifacts = ["out.txt"]
context = "run.py writes a number scaled by lib/util.py; evaluate.py reads it back."
"""
RUN = ("import os\nfrom lib.util import SCALE\nx = 1.0\nwith open('out.txt', 'w') as f:\n"
       "    f.write(str(x * SCALE))\nprint('---')\n")
EVAL = "import os\nv = float(open(os.path.join(os.environ['AUTORESEARCH_ARTIFACTS'], 'out.txt')).read())\n" \
       "print('---')\nprint(f'score: {v}')\n"
BASE = {".autoresearch.toml": MANIFEST, "run.py": RUN, "evaluate.py": EVAL, "lib/util.py": "SCALE = 1.0\n"}
GOOD_RUN = RUN.replace("x = 1.0", "x = 0.5")
BROKEN = [RUN.replace("x = 1.0", "x = 0.5 * undefined_name"), RUN.replace("x = 1.0", "x = 0.5 /"),
          RUN.replace("from lib.util import SCALE", "from lib.util import SCAL")]

# name -> (kinds, attempts, must land)
CASES = {
    "two files": ({"multi-file"}, [{"run.py": GOOD_RUN, "lib/util.py": "SCALE = 0.5\n"}], True),
    "new module": ({"multi-file"}, [{"lib/sched.py": "def factor():\n    return 0.5\n",
                                     "run.py": GOOD_RUN.replace("x = 0.5", "from lib.sched import factor\nx = factor()")}],
                   True),
    "check fails once": ({"check-failing"}, [{"run.py": BROKEN[0]}, {"run.py": GOOD_RUN}], True),
    "check fails 3 times": ({"check-failing"}, [{"run.py": b} for b in BROKEN] + [{"run.py": GOOD_RUN}], True),
    "two files, syntax error first": ({"multi-file", "check-failing"},
                                      [{"run.py": BROKEN[1], "lib/util.py": "SCALE = 0.5\n"},
                                       {"run.py": GOOD_RUN, "lib/util.py": "SCALE = 0.5\n"}], True),
    "edit the frozen evaluator": ({"must-refuse"}, [{"evaluate.py": EVAL.replace("float(", "0 * float(")}], False),
}


def _diff(files: dict[str, str]) -> str:
    out = []
    for path, new in files.items():
        old = BASE.get(path)
        out += difflib.unified_diff((old or "").splitlines(True), new.splitlines(True),
                                    "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    return "```diff\n" + "".join(out) + "```\n"


def _turns(attempts: list[dict[str, str]]) -> list:
    turns: list = []
    for files in attempts:
        turns += [Write(p, t) for p, t in files.items()] + [Shell("autoresearch-check || true")]
    return turns + [Done("done")]


def _repo(root: Path) -> Path:
    d = root / "research"
    d.mkdir(parents=True)
    repo = GitRepo.init(d)
    for rel, text in BASE.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    repo.commit_all_initial("baseline")
    return d


def _run_case(kind: str, exe: str | None, attempts: list, root: Path) -> bool:
    research_dir = _repo(root)
    if kind == "diff":
        server = FakeLLM()
        server.script(*[Reply(_diff(a)) for a in attempts])
        llm = f'provider = "openai"\nbase_url = "{server.openai_url}"\nmodel = "m"\n'
        agent = ""
    else:
        server = FakeAgentAPI(_turns(attempts))
        url = server.url if kind == "claude-code" else server.url + "/v1"
        llm = f'provider = "anthropic"\nbase_url = "{server.url}"\n'
        agent = f'[implementer.agent]\ncommand = "{exe}"\nmodel = "bench-model"\nbase_url = "{url}"\nwall_s = 120\n'
    try:
        cfg_path = root / "c.toml"
        cfg_path.write_text(f'[research]\nrepo = "{research_dir}"\n[llm]\n{llm}[implementer]\nkind = "{kind}"\n{agent}')
        cfg = load_config(cfg_path)
        research = open_research(cfg)
        impl = make_implementer(research, make_llm(cfg, research)[0], cfg, make_lifecycle(cfg, research))
        idea_id = impl.record_proposal(Proposal(title="Scale down", text="Halve the output.", origin="explore",
                                                epoch=1, model="m"))
        return impl.implement(idea_id) is not None
    finally:
        server.close()


def agent_binaries(root: Path) -> dict[str, str | None]:
    local = root / "tests" / "agent_cli" / "node_modules" / ".bin"
    return {k: (str(local / b) if (local / b).exists() else shutil.which(b))
            for k, b in (("claude-code", "claude"), ("codex", "codex"))}


def implementer_table(root: Path) -> int:
    """Print the table; returns the number of must-refuse cases that landed (a safety failure)."""
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench-not-a-key")
    os.environ.setdefault("OPENAI_API_KEY", "bench-not-a-key")
    kinds: dict[str, str | None] = {"diff": None}
    missing = []
    for k, exe in agent_binaries(root).items():
        if exe:
            kinds[k] = exe
        else:
            missing.append(k)
    totals = {g: sum(g in c[0] for c in CASES.values()) for g in ("multi-file", "check-failing", "must-refuse")}
    print(f"\nscripted ideas through each implementer ({len(CASES)} cases; the same attempts for every "
          "implementer; bench/implementers.py)\n")
    print(f"{'implementer':<12} {'multi-file landed':>18} {'check-failing landed':>21} {'frozen edit refused':>20} "
          f"{'s/idea':>7}")
    bad = 0
    for kind, exe in kinds.items():
        got = {g: 0 for g in totals}
        t0 = time.monotonic()
        for name, (groups, attempts, must_land) in CASES.items():
            with tempfile.TemporaryDirectory(prefix="ard-bench-impl-") as d:
                landed = _run_case(kind, exe, attempts, Path(d))
            for g in groups:
                got[g] += landed if must_land else not landed
            bad += (not must_land) and landed
        per = (time.monotonic() - t0) / len(CASES)
        print(f"{kind:<12} {got['multi-file']:>14}/{totals['multi-file']:<3} {got['check-failing']:>17}/"
              f"{totals['check-failing']:<3} {got['must-refuse']:>16}/{totals['must-refuse']:<3} {per:>7.1f}")
    if missing:
        print(f"\n(not installed, no column: {', '.join(missing)}; npm install --prefix tests/agent_cli)")
    return bad
