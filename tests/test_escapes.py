"""Every byte from an idea is data in every view (docs/security.md, "Every byte from an idea is data").

One hostile idea is written into a real research repo as a push would land it: its title, commit body,
branch name, a file name and the file's lines in its diff, its note's error and its trial log carry
every kind of terminal control: clear screen, window titles (OSC 0 and 2, ended by BEL and by ST), an
OSC 8 hyperlink, DCS and APC strings, hidden text, cursor moves, the 8-bit CSI, bidi overrides and
isolates, zero-width characters, backspace and carriage-return overprinting, and a forged "best" line.
Every terminal view then runs as a real subprocess: piped, under TERM=dumb, under NO_COLOR, with colour
forced, and in a real terminal (tmux, read back with capture-pane). None of them may pass a control or
format character through; the forged line may not overwrite or pass for the real one. The HTML report,
the dashboard's JSON and page, the daemon's log lines and `export` are checked too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import unicodedata
import uuid
from pathlib import Path

import pytest
from needs import need

from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ledger import Ledger
from autoresearchd.store.notes import Note, Status, Trial
from autoresearchd.views.safe import html_text, one_line, visible

from conftest import write_config

HOSTILE = {
    "clear": "\x1b[2J\x1b[3J\x1b[H",
    "osc2_st": "\x1b]2;PWNED-ST\x1b\\",
    "osc0_bel": "\x1b]0;PWNED-BEL\x07",
    "osc8_link": "\x1b]8;;http://evil.invalid/\x1b\\click\x1b]8;;\x1b\\",
    "dcs": "\x1bPq#0;2;0;0;0\x1b\\",
    "apc_pm_sos": "\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\",
    "hidden": "\x1b[8mHIDDEN",
    "cursor": "\x1b[5A\x1b[1;1H\x1b[2K\x1b7\x1b8",
    "csi_8bit": "\x9b2J\x9b1;1H\x9d0;PWNED-C1\x9c",
    "bidi": "\u202eevil\u202c\u2066iso\u2069\u202a\u202b\u202d\u2067\u2068",
    "invisible": "\u200b\u200c\u200d\u2060\ufeff\u00ad\u061c",
    "overprint": "XXXX\b\b\b\b\r",
}
FORGED = "best confirmed: score = 0.0100 ± 0.0001 over 9 seeds"
PAYLOAD = "".join(HOSTILE.values()) + FORGED
REAL_BEST = "best confirmed: score = 0.7010 ± 0.0010 over 2 seeds"
HIDDEN_CATS = {"Cc", "Cf", "Cs", "Zl", "Zp"}
SGR = re.compile(r"\x1b\[[0-9;]*m")


def hidden_chars(text: str) -> list[str]:
    """Every control or format character in text but newline and tab, by code point."""
    return sorted({f"U+{ord(c):04X}" for c in text if c not in "\n\t" and unicodedata.category(c) in HIDDEN_CATS})


def assert_inert(out: str, where: str, styled: bool = False) -> None:
    """No control or format character reached the output. Where rich may style (a terminal, forced
    colour), its own SGR colour sequences are allowed, and nothing else; never conceal (SGR 8)."""
    assert "\x1b[8m" not in out, f"{where}: hidden text obeyed"
    rest = SGR.sub("", out) if styled else out
    assert not hidden_chars(rest), f"{where}: raw {hidden_chars(rest)} in {rest[:600]!r}"


def _commit(repo: Path, files: dict[bytes, bytes], message: bytes) -> str:
    """A commit of main's tree plus files (raw byte paths allowed), message verbatim: a push's bytes."""
    env = dict(os.environ, GIT_INDEX_FILE=str(repo.parent / f"idx-{uuid.uuid4().hex[:6]}"),
               GIT_AUTHOR_NAME="h", GIT_AUTHOR_EMAIL="h@h", GIT_COMMITTER_NAME="h", GIT_COMMITTER_EMAIL="h@h")

    def run(*a, input=None):
        return subprocess.run(["git", "-C", str(repo), *a], capture_output=True, check=True, env=env,
                              input=input).stdout.decode().strip()
    run("read-tree", "main")
    for path, data in files.items():
        sha = run("hash-object", "-w", "--stdin", input=data)
        subprocess.run([b"git", b"-C", str(repo).encode(), b"update-index", b"--add", b"--cacheinfo",
                        b"100644," + sha.encode() + b"," + path], check=True, env=env, capture_output=True)
    tree = run("write-tree")
    return run("commit-tree", tree, "-p", "main", input=message)


@pytest.fixture
def hostile(toy_env, tmp_path):
    """The research repo with the hostile idea (measured, confirmed best), a failed hostile idea with a
    hostile error, and the baseline's note; returns (config, best commit, failed commit, branch)."""
    repo = GitRepo(toy_env)
    body = f"Body {PAYLOAD}\n{FORGED}\nmore {HOSTILE['clear']}text\n"
    run_py = (Path(toy_env) / "run.py").read_text().replace("x = 1.0", f"x = 0.7  # {PAYLOAD}")
    fname = f"notes{HOSTILE['clear']}{HOSTILE['bidi']}\u009b.txt".encode()
    best = _commit(toy_env, {b"run.py": run_py.encode(), fname: f"{PAYLOAD}\n{FORGED}\n".encode()},
                   f"Lower lr {PAYLOAD}\n\n{body}".encode())
    branch = f"idea/h/evil\u202e\u009bname"
    repo.update_ref(f"refs/heads/{branch}", best)
    failed = _commit(toy_env, {b"run.py": run_py.replace("0.7", "0.6").encode()},
                     f"Crash it {HOSTILE['cursor']}{HOSTILE['osc0_bel']}\n".encode())
    repo.update_ref("refs/heads/idea/h/crash", failed)
    log = ("step 1 loss 2.0\r\n" + PAYLOAD + "\n" + FORGED + "\n" + HOSTILE["overprint"] + FORGED + "\n"
           + HOSTILE["osc2_st"] + "\nend\n").encode()
    log_sha = repo.hash_blob(log)
    led = Ledger(repo)
    base = repo.rev_parse("refs/heads/main")
    led.write_note(base, Note(status=Status.SUCCEEDED, metric="score", value=1.005, values=[1.0, 1.01], std=0.007,
                              seeds=[0, 1], gpu_s=50.0))
    led.write_note(best, Note(status=Status.SUCCEEDED, metric="score", value=0.701, values=[0.7, 0.702], std=0.001,
                              seeds=[0, 1], baseline=1.005, delta=-0.304, decision="confirmed", gpu_s=40.0,
                              host="local", log=log_sha,
                              trials=[Trial(trial_id=f"t-{k}", seed=k, status=Status.SUCCEEDED, value=v, host="local",
                                            log=log_sha) for k, v in enumerate((0.7, 0.702))]))
    err = f"run exited with code 1: Traceback {PAYLOAD}\n{FORGED}"
    led.write_note(failed, Note(status=Status.FAILED, metric="score", error=err, gpu_s=5.0, host="local",
                                trials=[Trial(trial_id="t-f", seed=0, status=Status.FAILED, error=err, log=log_sha)]))
    cfg = write_config(tmp_path, toy_env)
    return cfg, best, failed, branch


def cli(cfg, *args, env: dict | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TERM")}
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), *args],
                       capture_output=True, text=True, timeout=120,
                       env=dict(base, COLUMNS="100", **(env or {})))
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout + p.stderr


def views(best: str, failed: str, tmp: Path) -> dict[str, list[str]]:
    return {"status": ["status"], "ideas": ["ideas"], "show": ["show", best[:12]],
            "show-full": ["show", "--diff", "--log", best[:12]], "show-failed": ["show", failed[:12]],
            "show-baseline": ["show", "baseline"], "report": ["report", "--out", str(tmp / "report")],
            "doctor": ["doctor"]}


@pytest.mark.parametrize("env", [{}, {"TERM": "dumb"}, {"NO_COLOR": "1"},
                                 {"FORCE_COLOR": "1", "TERM": "xterm-256color"}],
                         ids=["piped", "TERM=dumb", "NO_COLOR", "FORCE_COLOR"])
def test_every_terminal_view_shows_hostile_text_and_obeys_none_of_it(hostile, tmp_path, env):
    cfg, best, failed, branch = hostile
    styled = "FORCE_COLOR" in env
    outs = {}
    for name, args in views(best, failed, tmp_path).items():
        if name == "doctor":
            p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "doctor"],
                               capture_output=True, text=True, timeout=120, env=dict(os.environ, **env))
            out = p.stdout + p.stderr
        else:
            out = cli(cfg, *args, env=env)
        assert_inert(out, " ".join(args), styled=styled)
        outs[name] = out
    if not styled:
        assert all("\x1b" not in o for o in outs.values())
    plain = {k: SGR.sub("", v) for k, v in outs.items()}
    # the hostile text is shown, written out: a reader sees what was tried
    assert "\\x1b[2J" in plain["status"] and "\\u202e" in plain["status"]                   # title and branch
    assert "evil\\u202e\\x9bname" in plain["status"]
    assert "\\x1b]0;PWNED-BEL\\x07" in plain["show"] and "\\x9b2J" in plain["show"]
    assert "\\x08\\x08\\x08\\x08\\r" in plain["show-full"]                                 # overprinting
    assert "\\x1b[8mHIDDEN" in plain["show-full"]                                        # the diff's lines
    assert "PWNED-BEL" in plain["show-failed"]                                           # the error
    # the real best line is there, once, and the forged one never starts a line of its own outside the
    # idea's own words: in a log it sits behind the untrusted-output gutter
    for name in ("status",):
        starts = [ln for ln in plain[name].splitlines() if ln.startswith("best confirmed")]
        assert len(starts) == 1 and starts[0].startswith(REAL_BEST), starts
    log_part = plain["show"].split("trial output, untrusted text", 1)[1]
    assert f"| {FORGED}" in log_part and "| XXXX\\x08\\x08\\x08\\x08\\r" + FORGED in log_part
    assert not any(ln.startswith(FORGED) for ln in log_part.splitlines())
    assert "| step 1 loss 2.0\n" in log_part                                              # CRLF is a line end


def test_json_export_and_dashboard_keep_the_raw_text(hostile, tmp_path):
    cfg, best, failed, branch = hostile
    title = f"Lower lr {PAYLOAD}"
    rows = json.loads(cli(cfg, "ideas", "--json"))
    assert title in [r["title"] for r in rows]
    out = cli(cfg, "status", "--json")
    assert "\x1b" not in out
    assert json.loads(out)["best"]["title"] == title and json.loads(out)["best"]["branch"] == branch
    cli(cfg, "export", "--out", str(tmp_path / "t.jsonl"))
    recs = {r["commit"]: r for r in map(json.loads, (tmp_path / "t.jsonl").read_text().splitlines())}
    assert recs[best]["title"] == title and recs[best]["branch"] == branch
    assert FORGED in recs[best]["idea"] and HOSTILE["clear"] in recs[best]["code_diff"]
    assert recs[failed]["error"].startswith("run exited with code 1: Traceback " + PAYLOAD)
    # the dashboard's API: raw text, JSON-escaped
    from autoresearchd.config import load_config
    from autoresearchd.views.dashboard import Snapshot
    from autoresearchd.views.summary import load
    research, pop = load(load_config(cfg))
    # encoded as the server's JSONResponse encodes (UTF-8, ensure_ascii=False): C0 controls still escaped
    page = json.dumps(Snapshot(load_config(cfg), research, pop, "v1", secrets=[]).idea(best[:12]), ensure_ascii=False)
    assert "\x1b" not in page and "\\u001b[2J" in page
    back = json.loads(page)
    assert back["title"] == title and PAYLOAD in back["logs"][0]["text"] and back["branch"] == branch


def test_html_report_escapes_and_shows_the_hostile_text(hostile, tmp_path):
    pytest.importorskip("matplotlib", reason="report needs matplotlib (the report extra)")
    cfg, best, failed, branch = hostile
    cli(cfg, "report", "--out", str(tmp_path / "r"))
    page = (tmp_path / "r" / "index.html").read_text()
    assert not hidden_chars(page), hidden_chars(page)
    assert html_text(f"Lower lr {PAYLOAD}") in page and "\\u202e" in page and "&lt;" not in html_text("x")
    assert html_text(branch) in page


def test_hidden_table_matches_this_pythons_unicode():
    """safe.py's table of control and format characters holds every one the running Python's
    unicodedata knows (a newer Unicode's additions fail here), and nothing that shows itself."""
    from autoresearchd.views.safe import is_hidden
    missing, extra = [], []
    for cp in range(0x110000):
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if (cat in HIDDEN_CATS) != is_hidden(ch) and not (cat == "Cn" and is_hidden(ch)):
            (missing if cat in HIDDEN_CATS else extra).append(f"U+{cp:04X} {cat}")
    assert not missing and not extra, (missing[:20], extra[:20])


def test_sanitizer_covers_each_class_member():
    for name, seq in HOSTILE.items():
        shown = visible(seq)
        assert not hidden_chars(shown), name
    assert visible("a\nb\tc") == "a\nb\tc" and one_line("a\nb\tc") == "a\\nb\\tc"
    assert visible("é 中 ✓ ü") == "é 中 ✓ ü"            # text that shows itself passes untouched
    assert visible("\ud800\U000e0041\u2028\u2029\x85\x7f") == "\\ud800\\U000e0041\\u2028\\u2029\\x85\\x7f"


def test_daemon_log_lines_neutralize_branch_names_and_file_names(toy_env, tmp_path):
    """A pushed branch the daemon rejects for its file: the daemon's own log line names the branch and
    the file; on the terminal (piped) and in daemon.log (--detach) it is shown, not obeyed."""
    name = f"big{HOSTILE['clear']}{HOSTILE['osc0_bel']}\u202e.txt".encode()
    sha = _commit(toy_env, {name: b"0" * 1_200_000}, f"Giant {PAYLOAD}\n".encode())
    GitRepo(toy_env).update_ref("refs/heads/idea/h/giant\u202e\u009b", sha)
    cfg = write_config(tmp_path, toy_env)
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start", "--until", "idle"],
                       capture_output=True, text=True, timeout=180, env=dict(os.environ, COLUMNS="300"))
    assert p.returncode == 0, p.stderr
    err = p.stdout + p.stderr
    assert "rejected" in err and "giant\\u202e\\x9b" in err, err
    assert_inert(err, "daemon log (terminal)")
    # --detach: the same lines in daemon.log
    GitRepo(toy_env).update_ref("refs/heads/idea/h/giant2\u202e", _commit(toy_env, {name: b"1" * 1_200_000},
                                                                          b"Giant again\n"))
    out = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "start", "--detach",
                          "--until", "idle"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    logfile = Path(out.stdout.split("log: ", 1)[1].strip())
    pid = int(out.stdout.split("pid ", 1)[1].split(")")[0])
    deadline = time.time() + 180
    while time.time() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)
    text = logfile.read_text()
    assert "giant2\\u202e" in text, text
    assert_inert(text, "daemon.log")
    assert all(re.match(r"\d{4}-\d\d-\d\d ", ln) for ln in text.splitlines() if ln), "a message forged a log line"


def test_doctor_run_log_tail_is_labelled_and_inert(make_repo, tmp_path):
    """`doctor --run` prints the end of a failing baseline's log: labelled untrusted, shown, not obeyed."""
    from conftest import TOY_EVAL, TOY_MANIFEST
    run = f"import sys\nprint({PAYLOAD!r})\nprint({FORGED!r})\nsys.exit(3)\n"
    repo = make_repo({".autoresearch.toml": TOY_MANIFEST, "run.py": run, "evaluate.py": TOY_EVAL}, "research")
    cfg = write_config(tmp_path, repo)
    p = subprocess.run([sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg), "doctor", "--run"],
                       capture_output=True, text=True, timeout=180, env=dict(os.environ, COLUMNS="120"))
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "trial output, untrusted text" in out and "\\x1b[2J" in out and f"| {FORGED}" in out, out
    assert_inert(out, "doctor --run")


# -- a real terminal --------------------------------------------------------------------------------
@pytest.mark.parametrize("term", [None, "dumb"], ids=["tmux-TERM", "tmux-TERM=dumb"])
def test_a_real_terminal_shows_the_real_lines(hostile, tmp_path, term):
    """tmux at 80x40: after status and show, the screen still holds the real lines (nothing cleared or
    overwritten), no text is concealed, and the window title is the session's own."""
    need("tmux", None if shutil.which("tmux") else "not installed (apt-get install tmux)")
    cfg, best, failed, branch = hostile
    sock = f"esc-{uuid.uuid4().hex[:8]}"
    done = tmp_path / "done"
    me = [sys.executable, "-m", "autoresearchd.cli", "--config", str(cfg)]
    cmd = " ; ".join([shlex.join(me + ["status"]), shlex.join(me + ["show", best[:12]]),
                      f"touch {shlex.quote(str(done))}", "sleep 120"])
    env = ["env", "-u", "COLUMNS", "-u", "LINES", "-u", "NO_COLOR", "-u", "FORCE_COLOR"]
    env += [f"TERM={term}"] if term else []
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run(tmux + ["new-session", "-d", "-x", "80", "-y", "40", "-s", "t", shlex.join(env) + " sh -c "
                           + shlex.quote(cmd)], check=True, timeout=30)
    try:
        subprocess.run(tmux + ["set-option", "-g", "history-limit", "5000"], timeout=30)
        deadline = time.time() + 120
        while not done.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert done.exists(), "the views did not finish in tmux"
        time.sleep(0.3)
        screen = subprocess.run(tmux + ["capture-pane", "-p", "-e", "-J", "-S", "-", "-t", "t"], capture_output=True,
                                text=True, timeout=30).stdout
        title = subprocess.run(tmux + ["display-message", "-p", "-t", "t", "#{pane_title}"], capture_output=True,
                               text=True, timeout=30).stdout
    finally:
        subprocess.run(tmux + ["kill-server"], timeout=30)
    assert "PWNED" not in title, title
    assert_inert(screen, "tmux capture", styled=True)
    text = SGR.sub("", screen)
    lines = [ln.rstrip() for ln in text.splitlines()]
    assert lines and lines[0].startswith("daemon not running"), lines[:5]       # not cleared, not overwritten
    assert sum(1 for ln in lines if ln.startswith(REAL_BEST)) == 1, lines
    assert not any(ln.startswith("best confirmed: score = 0.0100") for ln in lines)
    assert "\\x1b[2J" in text and "\\u202e" in text and "\\x1b[8mHIDDEN" in text
    assert "trial output, untrusted text" in text




def test_wandb_keeps_the_title_raw_and_its_html_panel_inert(hostile, tmp_path, monkeypatch):
    """W&B: the config's title is the raw string (W&B stores JSON and shows it as text); the idea's
    HTML panel is escaped with control and bidi characters written out."""
    pytest.importorskip("wandb", reason="wandb is not installed (the wandb extra)")
    from test_wandb import runs, wait_written

    from autoresearchd.config import WandbCfg, load_config
    from autoresearchd.views.summary import load
    from autoresearchd.views.wandb_mirror import WandbMirror
    cfg, best, failed, branch = hostile
    wdir = tmp_path / "wandb"
    wdir.mkdir()
    monkeypatch.setenv("WANDB_DIR", str(wdir))
    research, pop = load(load_config(cfg))
    idea = pop.resolve(best[:12])
    m = WandbMirror(WandbCfg(enabled=True, mode="offline"), research.manifest, repo=research.repo, dir=wdir,
                    background=False)
    m(idea.commit, idea, idea.note)
    assert m.logged == 1 and m.failed == 0
    wait_written(wdir, 1)
    (run,) = runs(wdir)
    assert run["config"]["title"] == f"Lower lr {PAYLOAD}" and run["config"]["branch"] == branch
    panels = [p.read_text() for p in wdir.rglob("*.html")]
    assert panels and all(not hidden_chars(p) for p in panels), [hidden_chars(p) for p in panels]
    assert any("\\u202e" in p and "\\x1b[2J" in p for p in panels)


def test_dashboard_page_writes_hostile_text_out_and_labels_logs(hostile):
    """The dashboard serves the raw text (JSON) and its page writes it out as text with the control
    and bidi characters shown; each trial log is labelled untrusted."""
    from dashserver import Server, chromium
    cfg, best, failed, branch = hostile
    drv = chromium()
    srv = Server(cfg)
    try:
        from selenium.webdriver.support.ui import WebDriverWait
        drv.get(srv.url + "/#/idea/" + best[:12])
        WebDriverWait(drv, 30, poll_frequency=0.1).until(
            lambda d: d.execute_script("return document.querySelector('pre.log.untrusted') !== null"))
        title = drv.execute_script("return document.querySelector('.idea h2').textContent")
        main = drv.execute_script("return document.querySelector('main').textContent")
        labels = drv.execute_script("return [...document.querySelectorAll('.badge.untrusted')].map(e => e.textContent)")
        errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        srv.stop()
        drv.quit()
    assert not errors, errors
    assert not hidden_chars(main), hidden_chars(main)
    assert title.strip() == visible(f"Lower lr {PAYLOAD}", keep="").strip()
    assert "\\u202e" in main and "\\x1b]2;PWNED-ST" in main and FORGED in main
    assert labels and all("untrusted" in x for x in labels)


def test_cli_errors_quote_hostile_text_inert(hostile):
    """An error that quotes idea text, one line (a configuration error) or a traceback (an uncaught
    exception), reaches the terminal written out."""
    cfg, best, failed, branch = hostile
    boom = ("import sys, autoresearchd.cli as c\n"
            "def cmd(args, cfg): raise RuntimeError(%r)\n"
            "c.COMMANDS['status'] = cmd\n"
            "sys.exit(c.main(['--config', %r, 'status']))\n") % (f"bad title {PAYLOAD}", str(cfg))
    p = subprocess.run([sys.executable, "-c", boom], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "RuntimeError: bad title \\x1b[2J" in p.stderr, p.stderr
    assert_inert(p.stderr, "traceback")
    conf = ("import sys, autoresearchd.cli as c\nfrom autoresearchd.config import ConfigError\n"
            "def cmd(args, cfg): raise ConfigError(%r)\n"
            "c.COMMANDS['status'] = cmd\n"
            "sys.exit(c.main(['--config', %r, 'status']))\n") % (f"branch {branch} {PAYLOAD}", str(cfg))
    p = subprocess.run([sys.executable, "-c", conf], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("autoresearchd: branch idea/h/evil\\u202e"), p.stderr
    assert_inert(p.stderr, "config error")
    assert len(p.stderr.strip().splitlines()) == 1


def test_progress_table_of_the_foreground_daemon_is_inert():
    """The live view `start` shows (and `status`'s running trials): a hostile title in a running
    trial's row, printed through the CLI's console into a forced terminal, keeps its columns and
    obeys nothing."""
    import io

    from autoresearchd.cli import console as cli_console
    from autoresearchd.views.progress import trials_table
    rows = [{"trial": "t-1", "idea": "h-1", "title": f"Lower lr {PAYLOAD}", "seed": 0, "where": "local/0",
             "purpose": "run", "elapsed_s": 12.0, "waiting_s": 13.0}]
    buf = io.StringIO()
    type(cli_console)(file=buf, force_terminal=True, width=80, color_system="standard").print(trials_table(rows, 60.0))
    out = buf.getvalue()
    assert_inert(out, "progress table", styled=True)
    lines = SGR.sub("", out).splitlines()
    assert lines[1].startswith("h-1 s0  Lower lr \\x1b[2J") and "0:12 / 1:00" in lines[1], lines
    assert all(len(ln) <= 80 for ln in lines), lines


def test_ideas_plain_columns_are_inert(hostile, monkeypatch):
    """Beyond IDEAS_RICH_ROWS `ideas` writes plain columns straight to the console's file (rich would
    take seconds): its cells are made visible before they are measured and written."""
    import io

    from autoresearchd import defaults
    from autoresearchd.cli import console as cli_console
    from autoresearchd.config import load_config
    from autoresearchd.views.observe import ideas_table
    cfg, best, failed, branch = hostile
    monkeypatch.setattr(defaults, "IDEAS_RICH_ROWS", 0)
    buf = io.StringIO()
    assert ideas_table(load_config(cfg), type(cli_console)(file=buf, width=200)) == 0
    out = buf.getvalue()
    assert_inert(out, "ideas (plain columns)")
    assert "Lower lr \\x1b[2J" in out and "2 idea(s)" in out
