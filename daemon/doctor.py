"""`autoresearchd doctor`: checks git, the config, the research repo and manifest, the runner's
hosts, and which API keys are present (never printing them)."""

from __future__ import annotations

import os
import shutil
import subprocess


def doctor(cfg, console) -> int:
    ok = True

    def line(good: bool, what: str, hint: str = "") -> None:
        nonlocal ok
        ok &= good
        mark = "[green]ok[/]  " if good else "[red]FAIL[/]"
        console.print(f"{mark} {what}" + (f" — {hint}" if hint and not good else ""))

    git = shutil.which("git")
    ver = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip() if git else ""
    line(bool(git), f"git: {ver or 'not found'}", "install git")
    line(True, f"config: {cfg.path or '(defaults, no file)'}")
    from .research import open_research
    try:
        research = open_research(cfg, create=False)
        m = research.manifest
        line(True, f"research repo: {research.repo.path} (baseline {research.baseline_ref})")
        line(True, f"env '{m.name}': {m.goal} {m.metric}, {m.time_budget_s}s budget, {m.gpus} GPU(s)")
        notes = research.repo.config_get("notes.displayRef")
        line(notes is not None, "notes.displayRef set (plain `git log` shows results)", "run `autoresearchd init`")
        from .app import make_runner
        runner = make_runner(cfg, research)
        slots = runner.slots()
        bad = [s.key for s in slots if not s.reachable]
        line(not bad, f"runner '{cfg.runner.kind}': {len(slots)} slot(s)" + (f", unreachable: {bad}" if bad else ""),
             "check the host entries and known_hosts (docs/hosts.md)")
        _sandbox_lines(cfg, runner, slots, line, console)
        runner.close()
    except Exception as e:  # noqa: BLE001 - doctor reports, it does not crash
        line(False, f"research repo: {e}", "run `autoresearchd init` or fix research.repo")
    from autoresearchd.llm import resolve_provider_name
    name, why = resolve_provider_name(cfg.llm)
    keys = [k for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", cfg.llm.api_key_env) if k and os.environ.get(k)]
    line(True, f"LLM provider: {name}" + (f" ({why})" if why else ""))
    line(True, "API keys present: " + (", ".join(sorted(set(keys))) or "none (the replay provider will be used)"))
    return 0 if ok else 1


def _sandbox_lines(cfg, runner, slots, line, console) -> None:
    """Which sandbox isolates trials on each host; `none` (chosen or fallen back to) is a warning."""
    kind = cfg.runner.sandbox or "bwrap"
    for host in sorted({s.host for s in slots if s.reachable}):
        try:
            hs = runner.host_sandbox(host)
        except Exception as e:  # noqa: BLE001 - reported, as a failure
            line(False, f"sandbox on {host}: {e}")
            continue
        if hs.sandbox.isolated:
            line(True, f"sandbox on {host}: {hs.sandbox.name}")
        else:
            why = "runner.sandbox = \"none\"" if kind == "none" else f"{kind} unavailable"
            console.print(f"[yellow]WARN[/] sandbox on {host}: none ({why}): trials can reach the "
                          f"evaluator, the daemon's files and this host; notes say `sandbox: none` "
                          f"(docs/security.md; Debian: apt-get install bubblewrap)")

