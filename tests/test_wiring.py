"""Wiring by construction (issue 28): app.build_daemon gives every part what it uses when it builds it
(the one lifecycle writer, its observers, the lessons store, the tuner) and sets nothing on a part
afterwards; the parts it builds share the one writer."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
from conftest import KNOB_X, TOY_EVAL, TOY_MANIFEST, TOY_RUN, write_config

from autoresearchd import app
from autoresearchd.app import build_daemon
from autoresearchd.config import load_config
from autoresearchd.store.lessons import GitLessonsStore


def test_build_daemon_sets_no_attribute_after_construction():
    tree = ast.parse(textwrap.dedent(inspect.getsource(app.build_daemon)))
    late = [ast.unparse(t) for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Attribute)
            and not ast.unparse(t).startswith("cfg.")]       # the config itself may be adjusted before use
    attached = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call)
                and isinstance(n.func, (ast.Name, ast.Attribute)) and ast.unparse(n.func).endswith("attach")]
    assert not late and not attached, (late, attached)


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
