"""The `autoresearchd` command line: init, adopt, start, stop, status, ideas, show, queue, doctor, report,
export, serve.

Configuration mistakes print one line and exit 2 (a traceback only with --debug).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from rich.live import Live
from rich.logging import RichHandler

from autoresearchd import defaults
from autoresearchd.config import ConfigError, load_config
from autoresearchd.research import (configure, consent_message, create_from_template, is_repo, open_research,
                                    research_path, template_path)
from autoresearchd.stopcmd import stop_despite, stop_daemon
from autoresearchd.store.gitrepo import GitRepo, state_dir
from autoresearchd.views.safe import SafeConsole, SafeFormatter, one_line, visible

# lazy: each command below imports the module that does its work when it runs. cli.py is the root
# (nothing imports it: tests/test_imports.py), so these hide no cycle; loading every command's module
# at start would cost every command (stop, status, a refused start) the whole daemon's import
# (docs/architecture.md, "Imports").

# every view prints through these: text from an idea is shown, never obeyed (views/safe.py)
console = SafeConsole(stderr=False)
err = SafeConsole(stderr=True)


def _setup_logging(level: str, logfile: Path | None = None) -> None:
    handlers: list[logging.Handler] = []
    if logfile is not None:
        h = logging.FileHandler(logfile)
        h.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(message)s"))
        handlers.append(h)
    else:
        h = RichHandler(console=err, show_path=False, rich_tracebacks=False)
        h.setFormatter(SafeFormatter("%(message)s"))
        handlers.append(h)
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=handlers, force=True,
                        format="%(message)s")
    for noisy in ("httpx", "paramiko", "watchdog", "anthropic", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.ERROR)  # "skipped: max instances" is by design (Daemon.poke)


def cmd_init(args, cfg) -> int:
    dest = Path(args.dir).resolve() if args.dir else research_path(cfg)[0]
    if (dest / ".git").exists():
        repo = GitRepo(dest)
        msg = consent_message(repo, configure(repo))
        console.print(msg or f"{dest} is already configured: `git log --notes` shows autoresearch notes",
                      markup=False, soft_wrap=True)
        return 0
    repo = create_from_template(template_path(cfg, args.env or cfg.research.env), dest)
    msg = consent_message(repo, configure(repo))
    console.print(f"created research repo {dest} from env '{args.env or cfg.research.env}'. Run it with "
                  f"`cd {dest} && autoresearchd start` (this repo is the research repo: push idea/* branches "
                  f"to it); see results with `git log --oneline --notes --branches`", highlight=False, markup=False,
                  soft_wrap=True)     # a path folded at the terminal's width is a command that no longer pastes
    if msg:
        console.print(msg, markup=False, soft_wrap=True)
    return 0


def _refuse_second_daemon(cfg) -> None:
    """Before building anything (recovery reads and writes leases) and before --detach forks: a
    daemon already running on this repo makes `start` exit 2 naming it. The daemon itself holds
    the lock (engine/lock.py); this only probes it."""
    from autoresearchd.engine.lock import hold_daemon_lock      # lazy: per command
    path, _ = research_path(cfg)
    if is_repo(path):
        os.close(hold_daemon_lock(state_dir(GitRepo(path)), path))


def cmd_start(args, cfg) -> int:
    # lazy: per command
    from autoresearchd.app import build_daemon
    from autoresearchd.validate import require_valid
    from autoresearchd.views.progress import render_progress
    if args.max_ideas is not None:      # a config derived from the loaded one, which stays as it was loaded
        cfg = cfg.model_copy(update={"daemon": cfg.daemon.model_copy(update={"max_ideas": args.max_ideas})})
    warnings = require_valid(cfg)        # the same checks as `doctor`, before anything is created
    _refuse_second_daemon(cfg)
    daemon = build_daemon(cfg)
    for w in warnings:
        logging.getLogger("autoresearchd").warning("%s", w.what)
    sd = state_dir(daemon.repo)
    if args.detach:
        logfile = sd / "daemon.log"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            # one unwrapped line: scripts read the pid and the path out of it
            console.print(f"autoresearchd started in the background (pid {pid}); log: {logfile}",
                          soft_wrap=True, markup=False, highlight=False)
            return 0
        # A session of its own, and none of the caller's streams: `x=$(autoresearchd start --detach)`
        # returns as soon as the parent exits, because nothing here holds its pipe open.
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        out = os.open(logfile, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(devnull)
        os.close(out)
        _setup_logging(cfg.daemon.log_level, logfile)
    log = logging.getLogger("autoresearchd")
    log.info("research repo: %s (%s; baseline %s)", daemon.repo.path, daemon.research.why,
             daemon.research.baseline_ref)
    log.info("env: %s — %s %s, budget %ss per run; runner: %s", daemon.research.manifest.name,
             daemon.research.manifest.goal, daemon.research.manifest.metric,
             daemon.research.manifest.time_budget_s, cfg.runner.kind)
    if daemon.llm_note and daemon.llm_note.startswith("no "):
        log.warning("%s", daemon.llm_note)
    else:
        log.info("LLM: %s", daemon.llm_note)
    until = None
    if args.until == "idle":
        until = daemon.idle
    elif args.until == "first-note":
        def until(pop):
            return any(i.note is not None for i in pop.ideas) or pop.baseline_note is not None
    live = progress = None
    if not args.detach and console.is_terminal:
        live = Live(console=console, refresh_per_second=1, transient=True)
        live.start()

        def progress(pop, state):
            live.update(render_progress(state, pop, time_budget_s=daemon.research.manifest.time_budget_s,
                                        ideas_per_epoch=cfg.policy.ideas_per_epoch))
    try:
        daemon.run_forever(until=until, progress=progress)
    finally:
        if live is not None:
            live.stop()
    return 0


def cmd_stop(args, cfg) -> int:
    return stop_daemon(open_research(cfg, create=False).repo, args.now)


def cmd_status(args, cfg) -> int:
    from autoresearchd.views.observe import status      # lazy: per command
    return status(cfg, console, as_json=args.json)


def cmd_ideas(args, cfg) -> int:
    from autoresearchd.views.observe import ideas_table     # lazy: per command
    return ideas_table(cfg, console, status=args.status, origin=args.origin, epoch=args.epoch,
                       as_json=args.json, limit=args.limit)


def cmd_show(args, cfg) -> int:
    from autoresearchd.views.observe import show        # lazy: per command
    return show(cfg, console, args.idea, diff=args.diff, full_log=args.log)


def cmd_queue(args, cfg) -> int:
    from autoresearchd.makelifecycle import make_lifecycle     # lazy: per command
    from autoresearchd.human import queue_text      # lazy: per command
    research = open_research(cfg)
    idea_id = queue_text(cfg, research, make_lifecycle(cfg, research), args.text, parent=args.parent,
                         title=args.title)
    console.print(f"queued {idea_id}: the daemon will implement it (Origin: human)")
    return 0


def cmd_adopt(args, cfg) -> int:
    from autoresearchd import adopt     # lazy: per command
    root = Path(args.dir or ".").resolve()
    if not root.is_dir() or (found := GitRepo.discover(root)) is None or found.path != root:
        raise ConfigError(f"{root} is not the top of a git repo; adopt works on a repo's root (git init first)")
    tty = sys.stdin.isatty() and console.is_terminal
    p = adopt.plan(root, force=args.force, ask=_ask_command if tty else None)
    f = p.findings
    console.print(f"training script: {f.train}; metric: {f.metric} ({f.goal}) — {f.metric_why}", markup=False, soft_wrap=True)
    for line in adopt.report_lines(f):
        console.print(line, markup=False, soft_wrap=True)
    written = adopt.write(root, p)
    console.print(f"wrote {', '.join(written)} in {root}" +
                  (f"; kept your existing {', '.join(p.kept)}" if p.kept else ""), markup=False, soft_wrap=True)
    console.print("next:", markup=False, soft_wrap=True)
    for i, step in enumerate(adopt.next_steps(root, p, written), 1):
        console.print(f"  {i}. {step}", markup=False, soft_wrap=True)
    ask = args.commit or (tty and _answer(f"commit {len(written)} file(s) now, as they are? [y/N] ").lower() == "y")
    if ask:
        sha = adopt.commit(root, written)
        console.print(f"committed {sha[:10]}: {', '.join(written)}", markup=False, soft_wrap=True)
    else:
        console.print("nothing committed: review, fill in, then commit yourself", markup=False, soft_wrap=True)
    return 0


def _count(text: str) -> int:
    """An argument that counts (0 or more): checked when parsed, as daemon.max_ideas is in a file (the
    derived config is not validated again)."""
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n}: must be 0 or more")
    return n


def _answer(prompt: str) -> str:
    """A prompt's answer; end of input (Ctrl-D, a closed stdin) is the default answer, not a traceback."""
    try:
        return input(prompt).strip()
    except EOFError:
        console.print(markup=False)
        return ""


def _ask_command(f) -> int | None:
    """On a terminal: which of the training commands found becomes `run` (Enter keeps the first)."""
    console.print("training commands found:", markup=False)
    for i, c in enumerate([f.command, *f.alternatives], 1):
        console.print(f"  {i}. {c.cmd}   ({c.where}" + (f"; missing: {', '.join(c.missing)}" if c.missing else "")
                      + ")", markup=False, highlight=False, soft_wrap=True)
    answer = _answer(f"use which for `run`? [1-{len(f.alternatives) + 1}, Enter: 1] ")
    return int(answer) - 2 if answer.isdigit() and 2 <= int(answer) <= len(f.alternatives) + 1 else None


def cmd_doctor(args, cfg) -> int:
    from autoresearchd.views.doctor import doctor       # lazy: per command
    return doctor(cfg, console, run=args.run, budget_s=args.budget_s)


def cmd_report(args, cfg) -> int:
    try:
        import matplotlib  # noqa: F401  # lazy: the [report] extra; only to name it in one line when missing
    except ImportError:
        raise ConfigError("report needs matplotlib: pip install 'autoresearchd[report]' "
                          "(or pip install matplotlib)") from None
    from autoresearchd.views.report import write_report     # lazy: per command
    path = write_report(cfg, Path(args.out))
    console.print(f"wrote {path}")
    return 0


def cmd_export(args, cfg) -> int:
    from autoresearchd.views.export import export       # lazy: per command
    n = export(cfg, Path(args.out), fmt=args.format)
    console.print(f"exported {n} ideas to {args.out}")
    return 0


def cmd_serve(args, cfg) -> int:
    from autoresearchd.views.serve import serve     # lazy: per command
    return serve(cfg, host=args.host, port=args.port, token=args.token, token_file=args.token_file)


def _version() -> str:
    try:
        return version("autoresearchd")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _command(sub, name: str, help: str, **kw) -> argparse.ArgumentParser:
    """A subcommand whose own --help opens with what it does (argparse shows `help` only in the list)."""
    return sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".", **kw)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autoresearchd", description="git-native automated AI research daemon")
    p.add_argument("--version", action="version", version=f"autoresearchd {_version()}",
                   help="print the version and exit")
    p.add_argument("--config", help="path to .autoresearch.toml (default: search upward from the cwd)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", help="one of these (COMMAND --help for its options)")
    s = _command(sub, "init", help="create a research repo from an env template, or configure an existing one")
    s.add_argument("dir", nargs="?", help="where to create the repo (default: research.repo of the config)")
    s.add_argument("--env", help="template name (tinygpt, nanogpt, grpo) or path")
    s = _command(sub, "start", help="run the daemon (foreground unless --detach)")
    s.add_argument("--detach", action="store_true", help="run in the background; log to the state dir")
    s.add_argument("--until", choices=["idle", "first-note"], help="exit when idle / at the first result note")
    s.add_argument("--max-ideas", type=_count, default=None, help="stop proposing after this many ideas")
    s = _command(sub, "stop", help="stop a running daemon (graceful; --now for immediate)")
    s.add_argument("--now", action="store_true", help="stop at once instead of finishing the tick")
    s = _command(sub, "status", help="daemon, slots, counts, spend and best result (reads git)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    s = _command(sub, "ideas", help="the leaderboard")
    s.add_argument("--status", help="only ideas with this status (e.g. succeeded, queued, failed)")
    s.add_argument("--origin", help="only ideas of this origin (seed, exploit, explore, human)")
    s.add_argument("--epoch", type=int, help="only ideas of this epoch")
    s.add_argument("--limit", type=int, help="show at most this many rows")
    s.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    s = _command(sub, "show", help="one idea: text, diffstat, note, attempts, log tail")
    s.add_argument("idea", help="an idea id, a branch name or a commit prefix")
    s.add_argument("--diff", action="store_true", help="print the full diff instead of the diffstat")
    s.add_argument("--log", action="store_true", help="print whole logs instead of their tails")
    s = _command(sub, "queue", help="queue an idea in words (the implementer writes it; Origin: human)")
    s.add_argument("text", help="the idea, in words")
    s.add_argument("--title", help="a short title (default: the first line of the text)")
    s.add_argument("--parent", help="build on this idea's branch")
    s = _command(sub, "adopt", help="turn an existing training repo into an environment (writes a manifest "
                                     "skeleton and, if needed, an evaluator template; commits only if asked)")
    s.add_argument("dir", nargs="?", help="the repo's root (default: the current directory)")
    s.add_argument("--force", action="store_true", help="overwrite an existing .autoresearch.toml and templates")
    s.add_argument("--commit", action="store_true", help="commit the written files without asking")
    s = _command(sub, "doctor", help="check git, the config and env (as `start` does), hosts and API keys")
    s.add_argument("--run", action="store_true",
                   help="also run the env's check, then one run + evaluate of the baseline on the runner")
    s.add_argument("--budget-s", type=int, default=None,
                   help="with --run: the run's time budget in seconds (default: the env's time_budget_s)")
    s = _command(sub, "report", help="write an HTML report with plots")
    s.add_argument("--out", default="report", help="output directory (default: report)")
    s = _command(sub, "export", help="export the population as trajectories")
    s.add_argument("--out", default="trajectories.jsonl", help="output file (default: trajectories.jsonl)")
    s.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="file format (default: jsonl)")
    s = _command(sub, "serve", help="a live, read-only web dashboard of the search")
    s.add_argument("--host", default=defaults.SERVE_HOST, help="address to bind (anything but loopback needs a token)")
    s.add_argument("--port", type=int, default=defaults.SERVE_PORT, help="0 picks a free port")
    s.add_argument("--token", help="require this token (16+ characters) on every request")
    s.add_argument("--token-file", help="read the token from this file")
    return p


COMMANDS = {"init": cmd_init, "start": cmd_start, "stop": cmd_stop, "status": cmd_status, "ideas": cmd_ideas,
            "show": cmd_show, "queue": cmd_queue, "doctor": cmd_doctor, "adopt": cmd_adopt, "report": cmd_report,
            "export": cmd_export,
            "serve": cmd_serve}


def _traceback_shown(tp, value, tb) -> None:
    """An uncaught exception's traceback, made visible: its message may quote a title or a log."""
    sys.stderr.write(visible("".join(traceback.format_exception(tp, value, tb))))


def main(argv: list[str] | None = None) -> int:
    sys.excepthook = _traceback_shown
    p = parser()
    args = p.parse_args(argv)
    if args.cmd is None:             # no command: the help, as for --help
        p.print_help()
        return 0
    try:
        cfg = load_config(args.config)
        _setup_logging("DEBUG" if args.debug else cfg.daemon.log_level)
        return COMMANDS[args.cmd](args, cfg) or 0
    except ConfigError as e:
        if args.cmd == "stop" and not args.debug:
            try:
                return stop_despite(args.config, args.now, e)
            except ConfigError:
                pass
        if args.debug:
            raise
        sys.stderr.write(f"autoresearchd: {one_line(' '.join(str(e).split()))}\n")  # one line, never wrapped
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
