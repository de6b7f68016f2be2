"""bench/real_hybrid.py sets up a fair pair: the two arms' configs, read by the product's own config
loader, differ only in their research repo and `[tune] enabled`, and the shortened env differs from
envs/tinygpt only in its manifest's `run` line (the run itself is half an hour: docs/policies.md,
"Real runs on tinygpt")."""

from __future__ import annotations

import filecmp
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import real_hybrid  # noqa: E402

from autoresearchd.config import load_config  # noqa: E402


def test_the_two_arms_differ_only_in_tuning(tmp_path):
    env = real_hybrid.make_env(tmp_path, 60)
    cfgs = {arm: load_config(real_hybrid.make_config(tmp_path, arm, env, 0.1, 3)) for arm in real_hybrid.ARMS}
    dumps = {}
    for arm, c in cfgs.items():
        d = c.model_dump()
        assert d["research"]["repo"] == str(tmp_path / arm / "research")
        d["research"]["repo"] = None
        dumps[arm] = d
    assert cfgs["hybrid"].tune.enabled and not cfgs["llm"].tune.enabled
    dumps["llm"]["tune"]["enabled"] = True
    assert dumps["llm"] == dumps["hybrid"]
    c = cfgs["hybrid"]
    assert c.daemon.max_gpu_hours == 0.1 and c.tune.seed == 3 and c.policy.seed == 3
    assert c.llm.provider == "replay" and c.llm.replay_file == str(ROOT / "envs" / "replays" / "tinygpt.jsonl")
    # the repo's own config is the source: what the bench does not set is the demo's
    demo = load_config(ROOT / ".autoresearch.toml")
    assert c.runner.slots == demo.runner.slots == 1 and c.policy.name == demo.policy.name
    assert c.daemon.max_epochs == demo.daemon.max_epochs and c.policy.baseline_seeds == demo.policy.baseline_seeds


def test_the_env_is_the_template_with_fewer_steps(tmp_path):
    env = real_hybrid.make_env(tmp_path, 60)
    tpl = ROOT / "envs" / "tinygpt"
    cmp = filecmp.dircmp(tpl, env, ignore=["out", "__pycache__"])
    assert cmp.left_only == [] and cmp.right_only == [] and cmp.diff_files == [".autoresearch.toml"]
    old, new = ((p / ".autoresearch.toml").read_text().splitlines() for p in (tpl, env))
    changed = [(a, b) for a, b in zip(old, new) if a != b]
    assert len(old) == len(new) and changed == [('run = "python train.py"',
                                                 'run = "TINYGPT_STEPS=60 TINYGPT_THREADS=1 python train.py"')]
    assert filecmp.cmp(tpl / "train.py", env / "train.py", shallow=False)
