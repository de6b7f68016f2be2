"""Helpers for dashboard tests and benchmarks: run `autoresearchd serve` as a real subprocess, add an
idea (with a note) to a research repo through git, and start headless Chromium through Selenium."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import format_message
from autoresearchd.store.notes import Note, Status, Trial, format_note
from autoresearchd.store.refs import NOTES_REF


class Server:
    """`autoresearchd --config CFG serve ARGS` on a free port; .url once it listens."""

    def __init__(self, cfg, *args, env=None, timeout=60.0):
        self.proc = subprocess.Popen([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "serve",
                                      "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=dict(os.environ, **(env or {})))
        line = self.proc.stdout.readline()      # blocks until it listens (or exits)
        if "http://" not in line:
            self.proc.kill()
            raise AssertionError(f"serve did not start: {line}{self.proc.stderr.read()}")
        self.url = line.split("http://", 1)[1].split()[0]
        self.url = "http://" + self.url.rstrip("/")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def rss_kb(self) -> int:
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


def add_idea(repo: GitRepo, title: str, body: str, files: dict[str, bytes], note: Note | None = None,
             branch: str | None = None, trailers: dict | None = None, log: bytes | None = None) -> str:
    """Commit an idea off main (as a person's push would land), optionally with a result note."""
    base = repo.rev_parse("refs/heads/main")
    tree = repo.tree_with_files(base, files)
    commit = repo.commit_tree(tree, [base], format_message(title, body, trailers or {}))
    repo.update_ref(branch or f"refs/heads/idea/human/t{commit[:8]}", commit)
    if note is not None:
        if log is not None:
            sha = repo.hash_blob(log)
            note.log = sha
            for t in note.trials:
                t.log = sha
        repo.note_write(NOTES_REF, commit, format_note(note))
    return commit


def ok_note(value: float, baseline: float, decision: str, values: list[float] | None = None) -> Note:
    values = values or [value]
    return Note(status=Status.SUCCEEDED, metric="val_loss", goal="min", value=value,
                std=0.001 if len(values) > 1 else 0.0,
                seeds=list(range(len(values))), values=values, baseline=baseline, baseline_std=0.01,
                delta=value - baseline, decision=decision, host="gpu-a", wall_s=300.0, gpu_s=300.0 * len(values),
                finished_at=time.time(),
                trials=[Trial(trial_id=f"t-s{k}", seed=k, status=Status.SUCCEEDED, value=v, host="gpu-a", wall_s=300.0,
                              gpus=1) for k, v in enumerate(values)])


def chromium():
    """A headless Chromium driven by Selenium (skips when either is missing), logging the JS console."""
    import pytest   # lazy: bench/dashboard_shots.py imports this module outside pytest
    from needs import need
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra)")
    driver_path = shutil.which("chromedriver")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    need("chromium", None if driver_path and browser else
         "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000",
              "--disable-extensions", "--no-first-run", "--disable-background-networking"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=opts)
