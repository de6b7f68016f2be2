"""Screenshots of `autoresearchd serve` for the docs: the overview and one idea page, taken with headless
Chromium from a synthetic 300-idea research repo with a live-looking heartbeat (slots, budget).

    .venv/bin/python bench/dashboard_shots.py [--out docs]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from dashserver import Server, chromium  # noqa: E402
from popbuilder import build_population, write_cfg  # noqa: E402

from autoresearchd.config import load_config  # noqa: E402
from autoresearchd.store.gitrepo import state_dir  # noqa: E402
from autoresearchd.views.summary import leaderboard  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="docs")
    ap.add_argument("--n", type=int, default=300)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    with tempfile.TemporaryDirectory() as d:
        repo = build_population(Path(d) / "research", args.n, seed=7)
        cfg = write_cfg(d, repo.path, "[daemon]\nmax_gpu_hours = 200\n")
        now = time.time()
        (state_dir(repo) / "daemon.json").write_text(json.dumps({
            "pid": os.getpid(), "started": now - 3 * 86400 - 4000, "heartbeat": now,
            "llm": "anthropic claude-sonnet-4-5",
            "slots": [{"slot": f"gpu0{h}/{g}", "state": "busy" if (h + g) % 3 else "free",
                       "trial": f"e009-{h}{g}a7c3-s0" if (h + g) % 3 else None}
                      for h in (1, 2) for g in range(4)] + [{"slot": "gpu03/0", "state": "unreachable", "trial": None}],
            "implementing": [], "proposing": False, "stop_reason": None,
            "budget": {"usd": 41.7, "calls": 900, "tokens": 5_400_000, "max_usd": 100.0}}))
        srv = Server(cfg)
        drv = chromium()
        try:
            drv.set_window_size(1440, 1100)
            drv.get(srv.url + "/#/")
            t0 = time.time()
            while len(drv.find_elements("css selector", ".chart canvas")) < 2 and time.time() - t0 < 20:
                time.sleep(0.1)
            time.sleep(0.5)
            drv.save_screenshot(str(out / "dashboard-overview.png"))
            best = next(r for r in leaderboard(load_config(cfg)) if r["title"] == "Best confirmed idea")
            drv.set_window_size(1440, 1500)        # tall enough for the diff and the attempts
            drv.get(srv.url + "/#/idea/" + best["idea"])
            while not drv.find_elements("css selector", "pre.diff") and time.time() - t0 < 40:
                time.sleep(0.1)
            time.sleep(0.3)
            drv.save_screenshot(str(out / "dashboard-idea.png"))
            drv.set_window_size(1440, 1100)
            drv.get(srv.url + "/#/lineage")
            while not drv.find_elements("css selector", "li.node") and time.time() - t0 < 60:
                time.sleep(0.1)
            time.sleep(0.3)
            drv.save_screenshot(str(out / "dashboard-lineage.png"))
        finally:
            drv.quit()
            srv.stop()
    print(f"wrote {out}/dashboard-overview.png, dashboard-idea.png, dashboard-lineage.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
