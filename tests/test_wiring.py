"""Wiring by construction (issue 28): app.build_daemon gives every part what it uses when it builds it
(the one lifecycle writer, its observers, the lessons store, the tuner, the prompts' tuning section)
and sets nothing on a part afterwards; the parts it builds share the one writer.

The rule, read from the source with `ast`: the builders (`make_*`, `build_*` in daemon/app.py,
daemon/makerunner.py and daemon/makelifecycle.py) assign no attribute of what they built; the engine (daemon/engine/) and the
policies (policies/) assign nothing on what they were given (`self.policy.prompts.x = ...`,
`self.prompts.lessons = ...`) and wire nothing with `hasattr`/`setattr` (nor make their own attributes
lazily, `getattr(self, name, default)`); and no code changes a loaded config (`cfg.daemon.x = ...`)
outside daemon/config.py, which loads it: a part that needs another value is given a derived config
(`cfg.model_copy(update=...)`), so the caller's config stays what the file and the environment said."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import KNOB_X, REPO_ROOT, TOY_EVAL, TOY_MANIFEST, TOY_RUN, write_config

from autoresearchd.app import build_daemon
from autoresearchd.config import Config, load_config
from autoresearchd.makerunner import make_runner
from autoresearchd.manifest import parse_manifest
from autoresearchd.store.lessons import GitLessonsStore


BUILDERS = ("daemon/app.py", "daemon/makerunner.py", "daemon/makelifecycle.py")
PARTS = ("daemon/engine", "policies")
CONFIG_NAMES = ("cfg", "config", "self.cfg", "self.config")      # what the project calls a loaded config


def late_in_builders(root: Path = REPO_ROOT) -> list[str]:
    """`file:line: what` for each attribute a builder sets on what it built, or attaches afterwards."""
    bad = []
    for rel in BUILDERS:
        tree = ast.parse((root / rel).read_text())
        for fn in tree.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name.startswith(("make_", "build_"))):
                continue
            for n in ast.walk(fn):
                targets = (n.targets if isinstance(n, ast.Assign) else [n.target]
                           if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else [])
                bad += [f"{rel}:{n.lineno}: {ast.unparse(t)} =" for t in targets if isinstance(t, ast.Attribute)]
                if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("attach"):
                    bad.append(f"{rel}:{n.lineno}: {ast.unparse(n.func)}()")
    return bad


def late_in_parts(root: Path = REPO_ROOT) -> list[str]:
    """`file:line: what` for each assignment on an object a part holds (`self.a.b = ...`) and each
    `hasattr`/`setattr` call, or `getattr(self..., name, default)` (an attribute that may not be there
    yet), in daemon/engine/ and policies/."""
    bad = []
    for path in sorted(p for d in PARTS for p in (root / d).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for n in ast.walk(ast.parse(path.read_text())):
            targets = (n.targets if isinstance(n, ast.Assign) else [n.target]
                       if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                chain = t
                while isinstance(chain, ast.Attribute) and isinstance(chain.value, ast.Attribute):
                    chain = chain.value
                if chain is not t and isinstance(chain, ast.Attribute) and isinstance(chain.value, ast.Name) \
                        and chain.value.id == "self":
                    bad.append(f"{rel}:{n.lineno}: {ast.unparse(t)} =")
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and (
                    n.func.id in ("hasattr", "setattr")            # probing for a part, or wiring one in
                    or n.func.id == "getattr" and len(n.args) == 3 and ast.unparse(n.args[0]).startswith("self")):
                bad.append(f"{rel}:{n.lineno}: {ast.unparse(n)}")
    return bad


def config_changed(root: Path = REPO_ROOT) -> list[str]:
    """`file:line: what` for each assignment to a loaded config's attribute (`cfg.daemon.max_ideas = 3`,
    `self.cfg.x += 1`) in daemon/ (but daemon/config.py), policies/ and runners/."""
    bad = []
    files = [p for d in ("daemon", "policies", "runners") for p in (root / d).rglob("*.py")]
    for path in sorted(p for p in files if p.relative_to(root).as_posix() != "daemon/config.py"):
        rel = path.relative_to(root).as_posix()
        for n in ast.walk(ast.parse(path.read_text())):
            targets = (n.targets if isinstance(n, ast.Assign) else [n.target]
                       if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in (e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])):
                if isinstance(t, ast.Attribute) and ast.unparse(t).startswith(tuple(f"{c}." for c in CONFIG_NAMES)):
                    bad.append(f"{rel}:{n.lineno}: {ast.unparse(t)} =")
    return bad


def test_the_builders_set_no_attribute_after_construction():
    assert not late_in_builders(), late_in_builders()


def test_the_engine_and_the_policies_set_nothing_on_what_they_are_given():
    assert not late_in_parts(), late_in_parts()


def test_no_code_changes_a_loaded_config():
    assert not config_changed(), config_changed()


def test_the_scans_catch_late_wiring(tmp_path):
    """The rules themselves, on the late wiring issue 28 and its audit found."""
    (tmp_path / "daemon" / "engine").mkdir(parents=True)
    (tmp_path / "policies").mkdir()
    (tmp_path / "daemon" / "app.py").write_text(
        "def make_llm(cfg):\n    p = cls(cfg)\n    p.on_served = saver()\n    cfg.x = 1\n    return p\n"
        "def restore(p):\n    p.budget.usd += 1\n")
    (tmp_path / "daemon" / "makerunner.py").write_text(
        "def make_runner(cfg):\n    r = cls(cfg)\n    r.sandbox_fallback = True\n    r.mirror.attach(x)\n    return r\n")
    (tmp_path / "daemon" / "makelifecycle.py").write_text("def make_lifecycle(cfg, research):\n    return Lifecycle(research.repo)\n")
    (tmp_path / "daemon" / "engine" / "loop.py").write_text(
        "class D:\n    def f(self, pop):\n        self.n = 1\n        self.a.b = 2\n"
        "        if hasattr(self.policy, 'prompts'):\n            self.policy.prompts.tuning = pop\n"
        "        if pop != getattr(self, '_said', None):\n            self._said = pop\n")
    # the policies' own (policies/common.py set the lessons on its prompts at each proposal)
    (tmp_path / "policies" / "common.py").write_text(
        "class P:\n    def _lessons(self):\n        self.prompts.lessons = self.store.load().text\n"
        "        scheme = getattr(proto, 'scheme', None)\n        if hasattr(self.llm, 'members'):\n            pass\n")
    # the config changed after loading (app.py's deterministic baseline seeds, cli.py's --max-ideas)
    (tmp_path / "daemon" / "cli.py").write_text(
        "def cmd_start(args, cfg):\n    cfg.daemon.max_ideas = args.max_ideas\n"
        "    cfg = cfg.model_copy(update={})\n    self.cfg.x, n = 1, 2\n")
    (tmp_path / "daemon" / "config.py").write_text("def load_config():\n    cfg = Config()\n    cfg.path = p\n")
    assert late_in_builders(tmp_path) == ["daemon/app.py:3: p.on_served =", "daemon/app.py:4: cfg.x =",
                                          "daemon/makerunner.py:3: r.sandbox_fallback =",
                                          "daemon/makerunner.py:4: r.mirror.attach()"]
    assert late_in_parts(tmp_path) == ["daemon/engine/loop.py:4: self.a.b =",
                                       "daemon/engine/loop.py:5: hasattr(self.policy, 'prompts')",
                                       "daemon/engine/loop.py:6: self.policy.prompts.tuning =",
                                       "daemon/engine/loop.py:7: getattr(self, '_said', None)",
                                       "policies/common.py:3: self.prompts.lessons =",
                                       "policies/common.py:5: hasattr(self.llm, 'members')"]
    assert config_changed(tmp_path) == ["daemon/app.py:4: cfg.x =", "daemon/cli.py:2: cfg.daemon.max_ideas =",
                                        "daemon/cli.py:4: self.cfg.x ="]


def test_the_parts_share_the_one_writer(make_repo, tmp_path):
    pytest.importorskip("optuna", reason="optuna is not installed (the tune extra)")
    research = make_repo({".autoresearch.toml": TOY_MANIFEST + KNOB_X, "run.py": TOY_RUN, "evaluate.py": TOY_EVAL},
                         "research")
    replay = tmp_path / "ideas.jsonl"
    replay.write_text('{"idea": "[Experiment] lower x\\n[Code Changes] x = 0.5", "code_diff": ""}\n')
    cfg = write_config(tmp_path, research, '[tune]\nenabled = true\n')
    cfg.write_text(cfg.read_text().replace('provider = "none"', f'provider = "replay"\nreplay_file = "{replay}"'))
    d = build_daemon(load_config(cfg))
    assert d.implementer is not None and d.tuner is not None
    assert d.implementer.lifecycle is d.lifecycle and d.tuner.lifecycle is d.lifecycle
    assert isinstance(d.policy.lessons_store, GitLessonsStore) and d.policy.lessons_store.repo.path == d.repo.path
    # given at construction, never set afterwards: the prompts' tuning section, the replay position's
    # saver, and (a config file names the sandbox rules) no unsandboxed fallback
    assert "## Tuned knobs" in d.policy.prompts.lessons_block(d.read(scan=True), d.research.manifest)
    assert d.llm.on_served is not None and d.runner.sandbox_fallback is False


def test_the_runner_is_built_with_its_sandbox_fallback(tmp_path):
    """Only a config-less run (the README's demo) may fall back to no sandbox where bwrap is missing:
    make_runner gives the flag to the runner's constructor (it used to set it afterwards)."""
    m = parse_manifest(TOY_MANIFEST)
    demo = Config()                                     # built in code: no file, no runner.sandbox
    assert demo.path is None and demo.runner.sandbox is None
    assert make_runner(demo, None, manifest=m, local_dir=tmp_path / "a").sandbox_fallback is True
    chosen = Config(runner={"sandbox": "bwrap"})
    assert make_runner(chosen, None, manifest=m, local_dir=tmp_path / "b").sandbox_fallback is False


def test_a_derived_config_leaves_the_loaded_one_as_it_was(make_repo, tmp_path, monkeypatch):
    """A deterministic env's one baseline seed and `start --max-ideas N` reach the parts through a derived
    config; the config the caller loaded is not changed (before, both were set on it)."""
    import autoresearchd.app as app
    from autoresearchd.cli import main
    research = make_repo({".autoresearch.toml": TOY_MANIFEST.replace('metric = "score"',
                                                                     'metric = "score"\ndeterministic = true'),
                          "run.py": TOY_RUN, "evaluate.py": TOY_EVAL}, "research")
    cfg = load_config(write_config(tmp_path, research))
    assert cfg.policy.baseline_seeds == 2
    d = build_daemon(cfg)
    assert d.cfg.policy.baseline_seeds == 1 and d.dispatcher.cfg.policy.baseline_seeds == 1
    assert cfg.policy.baseline_seeds == 2
    d.runner.close()

    built = []

    def stop_at_build(c, *a, **k):          # the derived config start builds the daemon with
        built.append(c)
        raise KeyboardInterrupt
    monkeypatch.setattr(app, "build_daemon", stop_at_build)
    path = str(tmp_path / ".autoresearch.toml")
    assert main(["--config", path, "start", "--max-ideas", "3"]) == 130
    assert built[0].daemon.max_ideas == 3 and built[0].policy == load_config(path).policy
    with pytest.raises(SystemExit) as e:
        main(["--config", path, "start", "--max-ideas", "-1"])
    assert e.value.code == 2
