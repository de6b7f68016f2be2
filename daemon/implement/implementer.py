"""The implementer: a recorded proposal becomes an `idea/*` branch, or a record with the reason.

Flow for one idea: build the prompt (numbered files, hidden files stubbed, frozen ones marked),
ask the LLM, extract and apply the diff in a temporary index, compile the changed Python files,
run the env's quick `check` in a scratch export, and feed any failure back for self-revision up
to `max_revisions` times. Every attempt (response, diff, error) is kept in a transcript blob.
Proposals are written to git before any implementation starts, so a crash loses nothing.
"""

from __future__ import annotations

import fnmatch
import io
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
from importlib import resources
from pathlib import Path

from autoresearchd import defaults
from autoresearchd.goal import goal_word
from autoresearchd.registry import Registry
from autoresearchd.runners.sandbox import SandboxRequest
from autoresearchd.runners.sandbox import get as get_sandbox
from autoresearchd.store.gitrepo import GitRepo
from autoresearchd.store.ideas import branch_for, format_message, parse_message, prompt_hash
from autoresearchd.store.lifecycle import Lifecycle, Made
from autoresearchd.store.notes import Note, Status
from autoresearchd.store.proposals import record_proposal
from autoresearchd.store.refs import PROPOSALS_PREFIX, branch_name
from autoresearchd.store.trailers import parse_trailers
from autoresearchd.implement.patching import apply_diff, extract_diff
from autoresearchd.llm import BudgetExhausted, LLMError
from autoresearchd.implement.safety import SafetyRules
from autoresearchd.scrub import scrubbed_env
from autoresearchd.runners.prepare import prepare_key, prepared_dir, run_prepare_local
from autoresearchd.runners import sandbox as sandboxes
from autoresearchd.runners.isolation import resolve
from autoresearchd.runners.local import LocalShell
from autoresearchd.tune.knobs import file_error
from autoresearchd.vocab import Origin

log = logging.getLogger("autoresearchd")


def prompt_template(name: str) -> str:
    return resources.files("autoresearchd.implement").joinpath("prompts", name).read_text()


def render_files(repo: GitRepo, commit: str, manifest, max_file_bytes: int = 200_000) -> str:
    """The editable view of the code: sorted paths, numbered lines, hidden files stubbed."""
    files = repo.read_files(commit)
    out = []
    for path in sorted(files):
        data = files[path]
        if manifest.is_hidden(path):
            out.append(f"## {path}\n(hidden from this view)\n")
            continue
        if manifest.editable and not manifest.is_frozen(path) and \
                not any(fnmatch.fnmatchcase(path, g) for g in manifest.editable):
            continue
        if b"\0" in data[:8192] or len(data) > max_file_bytes:
            out.append(f"## {path}\n(binary or large file, {len(data)} bytes, not shown)\n")
            continue
        text = data.decode(errors="replace")
        tag = " (READ-ONLY: frozen)" if manifest.is_frozen(path) else ""
        numbered = "\n".join(f"{i:5d}| {line}" for i, line in enumerate(text.split("\n"), 1))
        out.append(f"## {path}{tag}\n```\n{numbered}\n```\n")
    return "\n".join(out)


class Implementer:
    """Writes ideas as code: one diff-writing LLM call with self-revision. Every ref and note it writes
    goes through `lifecycle` (store/lifecycle.py), given by app.build_daemon with its observers."""

    def __init__(self, research, llm, cfg, lifecycle: Lifecycle):
        self.research, self.llm, self.cfg = research, llm, cfg
        self.repo: GitRepo = research.repo
        self.lifecycle = lifecycle

    # -- proposals -----------------------------------------------------------------------------------
    def record_proposal(self, prop) -> str | None:
        """Write the proposal to git before spending anything on it (store/proposals.py). Returns its
        idea id (None if it already exists)."""
        return record_proposal(self.repo, self.lifecycle, prop, self.research.baseline_commit,
                               self.research.manifest.metric)

    # -- implementation ------------------------------------------------------------------------------
    def implement(self, idea_id: str) -> str | None:
        """Implement a recorded proposal. Returns the branch ref on success, None on failure."""
        loaded = self._load(idea_id)
        if loaded is None:
            return None
        title, body, trailers, base = loaded
        m = self.research.manifest
        rules = self._rules()
        template = prompt_template("implement.md")
        prompt = template.format(context=m.context or m.description or m.name, metric=m.metric,
                                 goal_word=goal_word(m.goal), time_budget_s=m.time_budget_s,
                                 idea=f"{title}\n\n{body}", files=render_files(self.repo, base, m))
        messages = [{"role": "user", "content": prompt}]
        transcript, cost, tokens, model, error, status = [], 0.0, 0, None, None, Status.IMPLEMENT_FAILED
        tree = None
        attempts = 0
        for attempt in range(1, self.cfg.implementer.max_revisions + 2):
            attempts = attempt
            try:
                c = self.llm.complete(messages, purpose="implement" if attempt == 1 else "revise",
                                      meta={"idea": title, "attempt": attempt, "idea_id": idea_id})
            except BudgetExhausted:
                raise
            except LLMError as e:
                if e.completion is not None:     # an unusable answer still cost money
                    cost += e.completion.cost_usd
                    tokens += e.completion.input_tokens + e.completion.output_tokens
                error = f"LLM call failed: {e}"
                transcript.append({"attempt": attempt, "error": error})
                break
            cost += c.cost_usd
            tokens += c.input_tokens + c.output_tokens
            model = c.model
            diff = extract_diff(c.text)
            entry = {"attempt": attempt, "response": c.text, "diff": diff}
            transcript.append(entry)
            if not diff:
                error = "no unified diff found in the response (expected a ```diff block with --- a/ +++ b/ headers)"
            else:
                res = apply_diff(self.repo, base, diff, rules)
                entry["method"] = res.method
                if res.ok:
                    error = self._check(res.tree, res.changed)
                    if error is None:
                        tree, status = res.tree, Status.SUCCEEDED
                        break
                else:
                    error = res.error or res.reason or "the diff did not apply"
                    if res.rejected:
                        # a safety rule (frozen file, `..`, .git/, symlink, size) is final: sending it
                        # back would only invite the model to try the same path again
                        entry["error"], status = error, Status.REJECTED
                        break
            entry["error"] = error
            messages += [{"role": "assistant", "content": c.text},
                         {"role": "user", "content": prompt_template("revise.md").format(error=error)}]
        trailers["Prompt-Hash"] = trailers.get("Prompt-Hash") or "sha256:" + prompt_hash(template)
        return self._finish(idea_id, title, body, trailers, base, tree, status, error, transcript,
                            cost=cost, tokens=tokens, model=model, attempts=attempts)

    def _load(self, idea_id: str):
        """(title, body, trailers, base commit) of a recorded proposal, or None if it is gone."""
        prop_commit = self.repo.rev_parse(PROPOSALS_PREFIX + idea_id)
        if prop_commit is None:
            return None
        title, body, trailers = parse_message(self.repo.commit_message(prop_commit))
        base = trailers.get("Base") or self.repo.git("rev-parse", prop_commit + "^").strip()
        return title, body, trailers, base

    def _rules(self):
        return SafetyRules(is_frozen=self.research.manifest.is_frozen,
                           max_file_bytes=self.cfg.implementer.max_file_bytes,
                           max_diff_bytes=self.cfg.implementer.max_diff_bytes)

    def _finish(self, idea_id: str, title: str, body: str, trailers: dict, base: str, tree: str | None,
                status: Status, error: str | None, transcript: list, *, cost: float, tokens: int,
                model: str | None, attempts: int) -> str | None:
        """Store the transcript; then the idea's commit and branch (tree set), or a record with a note
        saying why it failed, each made by the lifecycle writer from the tree and the message. Returns
        the branch ref on success."""
        m = self.research.manifest
        proposed = parse_trailers(trailers)        # typed: a malformed number is absent, not a crash
        idea_cost, idea_tokens = proposed.idea_cost_usd or 0.0, proposed.idea_tokens or 0
        blob = self.lifecycle.store_log(f"{idea_id}-implement",
                                     json.dumps(transcript, indent=1).encode())
        trailers.update({"Model": model or trailers.get("Model"), "Attempts": attempts,
                         "Tokens": tokens + idea_tokens, "Implement-Cost-USD": f"{cost:.6f}",
                         "Cost-USD": f"{cost + idea_cost:.6f}", "Transcript": blob})
        if tree is not None:
            branch = branch_for(idea_id, title, trailers.get("Origin", Origin.SEED))
            # the commit, the mark, the branch; the proposal goes
            self.lifecycle.implemented(idea_id, Made((base,), format_message(title, body, trailers), tree), branch)
            log.info("implemented %s in %d attempt(s): %s", idea_id, attempts, branch_name(branch))
            return branch
        record = Made((base,), format_message(title, body, trailers))      # the base's tree: no code kept
        self.lifecycle.failed(idea_id, record, Note(status=status, idea_id=idea_id, metric=m.metric, error=error,
                                                    log=blob, tokens=tokens + idea_tokens, cost_usd=cost + idea_cost,
                                                    cost={"ideation": idea_cost, "implementation": cost}))
        log.info("could not implement %s after %d attempt(s): %s", idea_id, attempts, (error or "")[:200])
        return None

    def _prepare(self) -> tuple[str | None, str]:
        """The prepare step on the daemon machine, so `check` sees what trials see. It shares the
        local runner's cache (<git-dir>/autoresearch/trials/.prepared/<key>): it runs once."""
        r, m = self.cfg.runner, self.research.manifest
        root = Path(r.work_root).expanduser().resolve() if r.kind == "local" and r.work_root \
            else Path(defaults.local_trial_root(str(self.repo.path)))    # where the local runner puts trials
        # the harness less the evaluator's held-out files: run and check read the prepared dir
        files = [f for f in self.research.frozen_files() if f not in m.heldout()]
        harness = self.repo.archive(self.research.baseline_commit, files) if files else None
        return prepare_here(m, root, self.research.prepare_key(), harness)

    def _check(self, tree: str, changed: list[str]) -> str | None:
        """Pre-GPU checks: the knobs the idea declares, compile the changed Python files, then the env's
        quick `check`."""
        why = file_error(self.repo, tree, self.research.manifest)    # a bad declaration goes back to the model
        if why:
            return why
        py = [p for p in changed if p.endswith(".py")]
        for path, data in (self.repo.read_files(tree, py) if py else {}).items():
            try:
                compile(data, path, "exec")
            except SyntaxError as e:
                return f"{path}:{e.lineno}: SyntaxError: {e.msg}\n    {(e.text or '').rstrip()}"
        if not self.research.manifest.check:
            return None
        prepared = None
        if self.research.manifest.prepare:
            prepared, why = self._prepare()
            if prepared is None:
                return why
        m = self.research.manifest
        try:
            sandbox = self._check_sandbox()
        except RuntimeError as e:          # no usable sandbox here: never run the idea's code bare
            return f"the check command `{m.check}` was not run: {e}"
        return run_check(m, self.repo.archive(tree, exclude=m.heldout()), self.cfg.implementer.check_timeout_s,
                         prepared=prepared, sandbox=sandbox)

    def _check_sandbox(self):
        if getattr(self, "_sandbox", None) is None:
            self._sandbox = check_sandbox(self.cfg)
        return self._sandbox


def _daemon_path() -> str:
    """PATH for commands run on the daemon's machine: the daemon's interpreter first."""
    return os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


def prepare_here(manifest, root: Path, key: str, src_tar: bytes | None) -> tuple[str | None, str]:
    """Run (or reuse) the prepare step on this machine under `root`, from the files in `src_tar`
    (the baseline's frozen files). Returns ($AUTORESEARCH_PREPARED, "") or (None, why it failed)."""
    env = dict(scrubbed_env(), PATH=_daemon_path(),      # prepare runs with the trials' environment
               **manifest.data)
    with tempfile.TemporaryDirectory(prefix="ard-prep-") as src:
        if src_tar:
            tarfile.open(fileobj=io.BytesIO(src_tar)).extractall(src, filter="data")
        rc, tail = run_prepare_local(root, key, Path(src), manifest, env)
    if rc != 0:
        return None, (f"the prepare step `{manifest.prepare}` failed on the daemon machine (exit {rc}) before "
                      f"the check could run. Its output ends with:\n{tail}")
    return str(prepared_dir(root, key)), ""


def check_sandbox(cfg):
    """The sandbox the check runs in on this machine: the runner's kind, with the same rule when it
    is missing (an error, or for the config-less demo a flagged fallback). Raises RuntimeError."""
    rc = cfg.runner
    kind = rc.sandbox or defaults.SANDBOX
    if kind == "none":
        return sandboxes.get("none")
    return resolve(LocalShell(), "check", kind, rc.sandbox_image, os.environ.get("PATH", ""),
                   rc.sandbox is None and cfg.path is None).sandbox


def run_check(manifest, code_tar: bytes, timeout_s: float, prepared: str | None = None,
              sandbox=None) -> str | None:
    """The env's quick `check` command in a scratch copy of the code: None, or why it failed.
    `doctor --run` uses it on the baseline, the implementer on every implemented idea. `prepared`:
    the prepare step's output directory on this machine ($AUTORESEARCH_PREPARED); when the manifest
    has `prepare` and none is given, prepare runs first in a scratch directory, from `code_tar`."""
    cmd = manifest.check
    if not cmd:
        return None
    with tempfile.TemporaryDirectory(prefix="ard-check-") as d:
        if manifest.prepare and prepared is None:
            prepared, why = prepare_here(manifest, Path(d) / "prep", prepare_key(manifest, []), code_tar)
            if prepared is None:
                return why
        code = Path(d) / "code"
        code.mkdir()
        tarfile.open(fileobj=io.BytesIO(code_tar)).extractall(code, filter="data")
        env = dict(scrubbed_env(), AUTORESEARCH_CHECK="1", AUTORESEARCH_SEED="0",   # it runs untrusted code too
                   PATH=_daemon_path(),
                   **manifest.data, **({"AUTORESEARCH_PREPARED": prepared} if prepared else {}))
        # the idea's code on this machine: in the sandbox (only the scratch copy is writable)
        ro = [os.path.expanduser(v) for v in manifest.data.values() if v.startswith(("/", "~/"))]
        req = SandboxRequest(argv=["bash", "-c", cmd], cwd=str(code), writable=[d], env=env, path=env["PATH"],
                             network=manifest.network, readonly=ro + ([prepared] if prepared else []))
        try:
            p = subprocess.run((sandbox or get_sandbox("none")).argv(req), cwd=code, env=env, capture_output=True,
                               timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired:
            return f"the check command `{cmd}` did not finish within {timeout_s:.0f}s"
        if p.returncode != 0:
            out = (p.stdout + p.stderr).decode(errors="replace")
            return f"the check command `{cmd}` failed (exit {p.returncode}). Its output ends with:\n{out[-3000:]}"
    return None


# implementer.kind -> the class that writes ideas as code (docs/llm.md): one diff-writing LLM call
# with self-revision, or a coding-agent CLI session behind the same gates.
_REGISTRY = Registry("implementer", "implementers", {
    "diff": "autoresearchd.implement.implementer:Implementer",
    "claude-code": "autoresearchd.implement.agent_implementer:AgentImplementer",
    "codex": "autoresearchd.implement.agent_implementer:AgentImplementer",
})
names, get = _REGISTRY.names, _REGISTRY.get


def make_implementer(research, llm, cfg, lifecycle: Lifecycle) -> Implementer:
    """The implementer that `implementer.kind` names (KeyError lists the valid kinds), writing through
    `lifecycle`."""
    return get(cfg.implementer.kind)(research, llm, cfg, lifecycle)
