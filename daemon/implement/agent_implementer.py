"""The agent implementer (`implementer.kind = "claude-code" | "codex"`): a coding-agent CLI writes
the idea in a scratch worktree; its result goes through the same gates as an LLM diff.

Flow for one idea:
1. export the parent commit to a scratch directory outside the research repo (hidden files left
   out, frozen files read-only), with a fresh HOME for the CLI and an `autoresearch-check` helper
   that runs the env's quick check on a copy of the worktree;
2. run one session in the sandbox (runners/sandbox.py), with its wall-time, turn and USD limits
   (agent_session). The network is shared, since the CLI must reach the model API and bwrap cannot
   narrow it to one host (docs/llm.md, "Network");
3. stage the worktree on top of the parent (`git add -A` in a temporary index: symlinks stay
   symlinks) and gate the tree exactly as an LLM diff's tree is gated: safety (frozen, paths,
   symlinks, .git/, sizes, binaries), the key must not appear in it, py_compile, then `check`;
4. commit on the idea's branch with the usual trailers plus `Implementer: <kind>`, or write a record
   with a note saying why (timeout, cap reached, no change, gate refused, check failed).
The session's event stream, redacted, is the transcript blob. Its cost joins the LLM budget.
"""

from __future__ import annotations

import io
import logging
import os
import shlex
import shutil
import stat
import sys
import tarfile
import tempfile
from pathlib import Path

from autoresearchd.goal import goal_word
from autoresearchd.implement import agent_cli
from autoresearchd.implement.agent_cli import Usage
from autoresearchd.implement.agent_session import redactor, run_session
from autoresearchd.implement.implementer import Implementer, prompt_template
from autoresearchd.store.gitrepo import GitError
from autoresearchd.store.ideas import prompt_hash
from autoresearchd.store.notes import Status
from autoresearchd.llm import Completion
from autoresearchd.runners import sandbox
from autoresearchd.implement.safety import check_tree_change

log = logging.getLogger("autoresearchd")

CHECK_HELPER = "autoresearch-check"


class AgentImplementer(Implementer):
    def __init__(self, research, llm, cfg, lifecycle):
        super().__init__(research, llm, cfg, lifecycle)
        self.kind = cfg.implementer.kind
        self.cli = agent_cli.get(self.kind)
        self.acfg = cfg.implementer.agent

    # -- cost ------------------------------------------------------------------------------------
    def _cost(self, usage: Usage) -> float:
        """Priced with llm.prices when the model has a price (the same table as every LLM call);
        else the CLI's own estimate (Claude Code reports one; Codex does not)."""
        model = self.acfg.model or usage.model
        price = self.cfg.llm.prices.get(model) if model else None
        if price is not None:
            return (usage.input_tokens * price.input + usage.output_tokens * price.output) / 1e6
        return usage.reported_usd or 0.0

    def _capped(self):
        """The session's limits, its USD cap lowered to what is left of llm.budget_usd."""
        budget = getattr(self.llm, "budget", None)
        if budget is None or budget.max_usd is None:
            return self.acfg
        left = max(0.0, budget.max_usd - budget.usd)
        return self.acfg.model_copy(update={"max_usd": min(self.acfg.max_usd, left)})

    def _record_spend(self, usage: Usage, usd: float) -> None:
        if self.llm is None:
            return
        self.llm.budget.record(Completion(text="", model=usage.model or self.kind, input_tokens=usage.input_tokens,
                                          output_tokens=usage.output_tokens, cost_usd=usd), "implement")

    # -- the worktree ----------------------------------------------------------------------------
    def _worktree(self, root: Path, base: str, prepared: str | None) -> tuple[Path, list[str]]:
        """Export base into root/wt without hidden files, frozen files read-only, and write the check
        helper. Returns the worktree and the hidden paths (kept from base when the result is staged)."""
        m = self.research.manifest
        wt = root / "wt"
        wt.mkdir()
        tarfile.open(fileobj=io.BytesIO(self.repo.archive(base))).extractall(wt, filter="data")
        hidden = [e.path for e in self.repo.ls_tree(base) if m.is_hidden(e.path)]
        for p in hidden:
            (wt / p).unlink(missing_ok=True)
        for e in self.repo.ls_tree(base):
            if m.is_frozen(e.path) and (wt / e.path).is_file() and not (wt / e.path).is_symlink():
                os.chmod(wt / e.path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        bindir = root / "bin"
        bindir.mkdir()
        check = m.check or "true"
        helper = bindir / CHECK_HELPER
        # a copy per check, so what the check writes (outputs, caches) never lands in the idea; and a
        # clean environment, so the code under check does not see the key the CLI holds
        data = " ".join(shlex.quote(f"{k}={v}") for k, v in
                        {**m.data, **({"AUTORESEARCH_PREPARED": prepared} if prepared else {})}.items())
        helper.write_text("#!/bin/bash\nset -e\nd=$(mktemp -d)\ntrap 'rm -rf \"$d\"' EXIT\n"
                          f"cp -a {shlex.quote(str(wt))}/. \"$d\"/\ncd \"$d\"\n"
                          "env -i PATH=\"$PATH\" HOME=\"$d\" TMPDIR=\"$d\" LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 "
                          f"AUTORESEARCH_CHECK=1 AUTORESEARCH_SEED=0 {data} bash -c {shlex.quote(check)}\n")
        helper.chmod(0o755)
        (root / "home").mkdir()
        return wt, hidden

    def _prompt(self, title: str, body: str) -> tuple[str, str]:
        m = self.research.manifest
        template = prompt_template("agent.md")
        return template.format(
            context=m.context or m.description or m.name, metric=m.metric,
            goal_word=goal_word(m.goal), time_budget_s=m.time_budget_s,
            idea=f"{title}\n\n{body}", frozen=", ".join(m.frozen) or "(none)",
            check_hint=CHECK_HELPER if m.check else f"{CHECK_HELPER} (this environment has no check; "
                                                    "it only confirms the copy works)",
            run=m.run), template

    def _sandboxed_argv(self, argv, wt: Path, root: Path, env: dict, home: str,
                        extra_ro: list[str]) -> tuple[list[str] | None, str | None]:
        try:
            box = sandbox.get(self.acfg.sandbox)
        except KeyError as e:
            return None, f"implementer.agent.sandbox: {e.args[0]}"
        why = box.available()
        if why:
            return None, f"the agent sandbox `{box.name}` is not usable here: {why}"
        req = sandbox.SandboxRequest(argv=argv, cwd=str(wt), writable=[str(wt), home, str(root / "tmp")],
                                     readonly=[str(root / "bin"), *_install_dirs(argv[0]), *extra_ro], env=env,
                                     network=True, path=env["PATH"])   # the model API needs the network
        return box.argv(req), None

    # -- one idea --------------------------------------------------------------------------------
    def implement(self, idea_id: str) -> str | None:
        loaded = self._load(idea_id)
        if loaded is None:
            return None
        title, body, trailers, base = loaded
        if self.llm is not None:
            self.llm.budget.check()       # BudgetExhausted stops implementing, as for the diff kind
        prompt, template = self._prompt(title, body)
        trailers["Prompt-Hash"] = trailers.get("Prompt-Hash") or "sha256:" + prompt_hash(template)
        trailers["Implementer"] = self.kind
        key = os.environ.get(self.acfg.api_key_env or self.cli.key_env) or None
        redact = redactor([key] if key else [])
        entry: dict = {"attempt": 1, "implementer": self.kind}
        tree, status, error, usage, usd = None, Status.IMPLEMENT_FAILED, None, Usage(), 0.0
        root = Path(tempfile.mkdtemp(prefix="ard-agent-"))
        try:
            exe = self.cli.find(self.acfg.command)
            if exe is None:
                error = self.cli.missing_hint()
            else:
                tree, status, error, usage, usd = self._session(exe, prompt, base, root, key, redact, entry)
        finally:
            _rmtree(root)
        entry["error"] = error
        self._record_spend(usage, usd)
        return self._finish(idea_id, title, body, trailers, base, tree, status, error and redact(error), [entry],
                            cost=usd, tokens=usage.input_tokens + usage.output_tokens,
                            model=self.acfg.model or usage.model, attempts=1)

    def _session(self, exe, prompt, base, root: Path, key, redact, entry: dict):
        prepared = None
        m = self.research.manifest
        if m.prepare and m.check:     # the check inside the session sees what trials see
            prepared, why = self._prepare()
            if prepared is None:
                return None, Status.IMPLEMENT_FAILED, why, Usage(), 0.0
        wt, hidden = self._worktree(root, base, prepared)
        (root / "tmp").mkdir()
        home = os.path.abspath(os.path.expanduser(self.acfg.home)) if self.acfg.home else str(root / "home")
        exe_dir = os.path.dirname(os.path.abspath(exe))
        node = shutil.which("node")
        path = os.pathsep.join(dict.fromkeys([str(root / "bin"), exe_dir, *( [os.path.dirname(node)] if node else []),
                                              os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]))
        env = {"PATH": path, "LANG": os.environ.get("LANG", "C.UTF-8"), "TERM": "dumb", "TMPDIR": str(root / "tmp"),
               "PYTHONDONTWRITEBYTECODE": "1", "NO_COLOR": "1", **self.research.manifest.data,
               **self.cli.env(self.acfg, home, key)}
        acfg = self._capped()
        plain = self.cli.argv(exe, prompt, acfg, str(wt), sandboxed=acfg.sandbox != "none")
        argv, why = self._sandboxed_argv(plain, wt, root, env, home, [prepared] if prepared else [])
        if argv is None:
            return None, Status.IMPLEMENT_FAILED, why, Usage(), 0.0
        res = run_session(self.cli, argv, env, str(wt), home, acfg, self._cost, redact)
        entry.update(session=res.outcome, wall_s=round(res.wall_s, 1), turns=res.usage.turns,
                     input_tokens=res.usage.input_tokens, output_tokens=res.usage.output_tokens,
                     cost_usd=round(res.usd, 6), events=res.events, stderr=res.stderr_tail[-4000:])
        if res.outcome != "finished":
            return None, Status.IMPLEMENT_FAILED, res.reason, res.usage, res.usd
        try:
            tree, status, error = self._gate(base, wt, hidden, key, entry)
        except GitError as e:     # e.g. a file name git cannot stage
            tree, status, error = None, Status.REJECTED, f"the agent's worktree could not be staged: {e}"
        entry["diff"] = redact(entry.get("diff", ""))
        return tree, status, error, res.usage, res.usd

    def _gate(self, base: str, wt: Path, hidden: list[str], key: str | None, entry: dict):
        """The worktree's tree through the same gates as an LLM diff's tree."""
        try:
            tree = self.repo.tree_from_dir(base, wt, keep=hidden, max_file_bytes=self.cfg.implementer.max_file_bytes)
        except ValueError as e:
            return None, Status.REJECTED, f"the agent's change was refused: {e}"
        changes = self.repo.diff_tree_raw(base, tree)
        entry["diff"] = self.repo.diff(base, tree)
        if not changes:
            return None, Status.IMPLEMENT_FAILED, f"the {self.kind} session ended without changing any file"
        reason = check_tree_change(self.repo, base, tree, self._rules())
        if reason is None and key:
            blobs = self.repo.cat_file_batch([c.new_sha for c in changes if c.status != "D"])
            if any(key.encode() in b for b in blobs.values()):
                reason = "the change contains the model API key; it may not be committed"
        if reason:
            return None, Status.REJECTED, f"the agent's change was refused: {reason}"
        error = self._check(tree, [c.path for c in changes if c.status != "D"])
        if error:
            return None, Status.IMPLEMENT_FAILED, error
        return tree, Status.SUCCEEDED, None


def _rmtree(root: Path) -> None:
    """Remove a scratch dir even where the agent made files read-only."""
    def fix(func, path, _exc):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            func(path)
        except OSError:
            pass
    shutil.rmtree(root, onexc=fix) if sys.version_info >= (3, 12) else shutil.rmtree(root, onerror=fix)


def _install_dirs(exe: str) -> list[str]:
    """What the CLI needs to start inside the sandbox: its npm install (the `node_modules` holding
    it, where its native binary lives), found from the path and from where the link points."""
    out = []
    for p in (os.path.abspath(exe), os.path.realpath(exe)):
        parts = Path(p).parts
        if "node_modules" in parts:
            i = len(parts) - 1 - parts[::-1].index("node_modules")
            d = str(Path(*parts[:i + 1]))
        else:
            d = os.path.dirname(p)
        if d not in out:
            out.append(d)
    return out
