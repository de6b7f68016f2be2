"""The coding-agent CLIs the agent implementer can drive: how to call each one, and how to read
its usage. A registry of `AgentCLI` classes with a `name` (`claude-code`, `codex`).

Each CLI runs non-interactively in a scratch worktree and writes a JSON event stream on stdout
(Claude Code: `-p --output-format stream-json --verbose`; Codex: `exec --json`). The stream is the
transcript. Usage is read as the session goes, so a session can be stopped at its turn or USD cap:
Claude Code puts each model message's usage in its stream; Codex puts it only at the end of its
stream, but writes a `token_count` event per model request to the rollout file in its home, which
is ours (a scratch CODEX_HOME per session unless `implementer.agent.home` is set).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from dataclasses import dataclass
from typing import ClassVar

from autoresearchd import defaults


@dataclass
class Usage:
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reported_usd: float | None = None     # the CLI's own cost estimate, when it gives one
    model: str | None = None


class AgentCLI:
    """One coding-agent CLI. Subclasses set the class attributes and build argv and env."""
    name: ClassVar[str] = ""
    binary: ClassVar[str] = ""
    key_env: ClassVar[str] = ""            # the key variable it reads by default
    npm_package: ClassVar[str] = ""

    def find(self, command: str | None) -> str | None:
        """The binary to run: `command` (a path or a name on PATH), else `binary` on PATH."""
        want = command or self.binary
        if os.sep in want:
            return want if os.access(want, os.X_OK) else None
        return shutil.which(want)

    def missing_hint(self) -> str:
        return (f"the {self.name} CLI `{self.binary}` was not found; install it with "
                f"`npm install -g {self.npm_package}` or set implementer.agent.command to its path")

    def argv(self, exe: str, prompt: str, cfg, cwd: str, sandboxed: bool) -> list[str]:
        raise NotImplementedError

    def env(self, cfg, home: str, key: str | None) -> dict[str, str]:
        """The variables this CLI needs on top of the session's clean environment."""
        raise NotImplementedError

    def usage(self, events: list[dict], home: str) -> Usage:
        """Usage so far, from the events (and, for codex, this session's rollout file in `home`)."""
        raise NotImplementedError


class ClaudeCode(AgentCLI):
    name, binary, key_env, npm_package = "claude-code", "claude", "ANTHROPIC_API_KEY", "@anthropic-ai/claude-code"

    def argv(self, exe, prompt, cfg, cwd, sandboxed):
        a = [exe, "-p", prompt, "--output-format", "stream-json", "--verbose",
             "--max-turns", str(cfg.max_turns), "--max-budget-usd", f"{cfg.max_usd:g}",
             # explicit tools instead of --dangerously-skip-permissions (refused as root, and it
             # would also allow web fetches and sub-agents)
             "--allowedTools", defaults.AGENT_TOOLS, "--disallowedTools", "WebFetch,WebSearch,Agent",
             "--permission-mode", "acceptEdits", "--no-session-persistence"]
        if os.environ.get(cfg.api_key_env or self.key_env):
            # minimal mode: no hooks, plugins or CLAUDE.md from the worktree; it authenticates with the
            # key only, so a subscription login (no key set) runs without it
            a.append("--bare")
        if cfg.model:
            a += ["--model", cfg.model]
        return a

    def env(self, cfg, home, key):
        e = {"HOME": home, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
             "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"}
        if key:
            e["ANTHROPIC_API_KEY"] = key
        if cfg.base_url:
            e["ANTHROPIC_BASE_URL"] = cfg.base_url
        return e

    def usage(self, events, home):
        u, per_msg = Usage(), {}
        for ev in events:
            if ev.get("type") == "system" and ev.get("model"):
                u.model = ev["model"]
            elif ev.get("type") == "assistant":
                msg = ev.get("message") or {}
                us = msg.get("usage") or {}
                inp = sum(int(us.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                        "cache_read_input_tokens"))
                old = per_msg.get(msg.get("id"), (0, 0))
                per_msg[msg.get("id")] = (max(old[0], inp), max(old[1], int(us.get("output_tokens") or 0)))
                u.model = msg.get("model") or u.model
            elif ev.get("type") == "result":
                us = ev.get("usage") or {}
                total = (sum(int(us.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                           "cache_read_input_tokens")), int(us.get("output_tokens") or 0))
                # the final totals, unless the CLI cut the session short (then they are zeros)
                if total[0] >= sum(v[0] for v in per_msg.values()):
                    per_msg = {"result": total}
                u.turns = int(ev.get("num_turns") or 0)
                if ev.get("total_cost_usd") is not None:
                    u.reported_usd = float(ev["total_cost_usd"])
        u.turns = u.turns or len(per_msg)
        u.input_tokens = sum(v[0] for v in per_msg.values())
        u.output_tokens = sum(v[1] for v in per_msg.values())
        return u


class Codex(AgentCLI):
    name, binary, key_env, npm_package = "codex", "codex", "OPENAI_API_KEY", "@openai/codex"
    PROVIDER = "autoresearchd"

    def argv(self, exe, prompt, cfg, cwd, sandboxed):
        a = [exe, "exec", "--json", "--skip-git-repo-check", "--color", "never", "-C", cwd]
        if sandboxed:
            # our sandbox is the boundary; codex's own (landlock/seccomp) cannot nest inside it
            a.append("--dangerously-bypass-approvals-and-sandbox")
        else:
            a += ["-s", "workspace-write"]
        if cfg.base_url:
            provider = "{name=%s, base_url=%s, env_key=%s, wire_api=\"responses\"}" % (
                json.dumps(self.PROVIDER), json.dumps(cfg.base_url), json.dumps(cfg.api_key_env or self.key_env))
            a += ["-c", f"model_provider={json.dumps(self.PROVIDER)}", "-c", f"model_providers.{self.PROVIDER}={provider}"]
        if cfg.model:
            a += ["-m", cfg.model]
        # the commands it runs do not inherit the key (Claude Code has no such switch without its own
        # sandbox: there the transcript redaction and the key gate are what hold)
        a += ["-c", 'shell_environment_policy.exclude=["*KEY*", "*TOKEN*", "*SECRET*", "*PASSW*"]']
        return a + ["--", prompt]

    def env(self, cfg, home, key):
        e = {"HOME": home, "CODEX_HOME": home}
        if key:
            e[cfg.api_key_env or self.key_env] = key
            e.setdefault("OPENAI_API_KEY", key)
        return e

    def usage(self, events, home):
        u = Usage()
        for ev in events:
            if ev.get("type") == "turn.completed":
                us = ev.get("usage") or {}
                u.input_tokens += int(us.get("input_tokens") or 0)
                u.output_tokens += int(us.get("output_tokens") or 0)
        # per request, while it runs: the rollout file's token_count events (cumulative totals). The
        # file is named after the thread id the stream announces first, so a shared home's other
        # sessions (a subscription login used by two sessions at once) never count.
        thread = next((ev.get("thread_id") for ev in events if ev.get("type") == "thread.started"), None)
        turns, inp, out, model = 0, 0, 0, None
        paths = glob.glob(os.path.join(glob.escape(home), "sessions", "**", f"rollout-*{glob.escape(thread)}.jsonl"),
                          recursive=True) if thread else []
        for path in paths[:1]:
            try:
                with open(path, errors="replace") as f:
                    for line in f:
                        if '"token_count"' not in line and '"turn_context"' not in line:
                            continue
                        try:
                            payload = json.loads(line).get("payload") or {}
                        except ValueError:
                            continue        # a line still being written
                        if payload.get("type") == "token_count" and payload.get("info"):
                            tot = payload["info"].get("total_token_usage") or {}
                            turns += 1
                            inp = max(inp, int(tot.get("input_tokens") or 0))
                            out = max(out, int(tot.get("output_tokens") or 0))
                        model = payload.get("model") or model
            except OSError:
                continue
        u.turns = turns
        u.input_tokens, u.output_tokens = max(u.input_tokens, inp), max(u.output_tokens, out)
        u.model = model
        return u


_CLIS: dict[str, type[AgentCLI]] = {c.name: c for c in (ClaudeCode, Codex)}


def names() -> list[str]:
    return sorted(_CLIS)


def get(name: str) -> AgentCLI:
    if name not in _CLIS:
        raise KeyError(f"unknown coding agent '{name}'; valid agents: {', '.join(names())}")
    return _CLIS[name]()


def steps(events: list[dict], limit: int = 40) -> list[str]:
    """One line per tool call or message in a session's event stream (either CLI's format), for
    `show` and the dashboard."""
    out: list[str] = []
    for ev in events:
        t = ev.get("type")
        if t == "assistant":
            for c in (ev.get("message") or {}).get("content") or []:
                if c.get("type") == "tool_use":
                    args = c.get("input") or {}
                    what = args.get("command") or args.get("file_path") or args.get("pattern") or json.dumps(args)
                    out.append(f"{c.get('name')}: {str(what)[:200]}")
                elif c.get("type") == "text" and c.get("text", "").strip():
                    out.append(f"says: {c['text'].strip()[:200]}")
        elif t == "item.completed":
            item = ev.get("item") or {}
            if item.get("type") == "command_execution":
                out.append(f"exec (exit {item.get('exit_code')}): {str(item.get('command'))[:200]}")
            elif item.get("type") == "file_change":
                out.append("edit: " + ", ".join(str(c.get("path")) for c in item.get("changes") or []))
            elif item.get("type") == "agent_message":
                out.append(f"says: {str(item.get('text', '')).strip()[:200]}")
    return out if len(out) <= limit else out[:limit // 2] + [f"... {len(out) - limit} more"] + out[-limit // 2:]
