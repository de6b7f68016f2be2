"""Config: discovery, validation with one-line errors and did-you-mean, env overrides, no secrets."""

import subprocess
import sys

import pytest

from autoresearchd.config import ConfigError, find_config, load_config

from conftest import REPO_ROOT


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "autoresearchd.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_repo_default_config_is_valid():
    cfg = load_config(REPO_ROOT / ".autoresearch.toml")
    assert cfg.research.env == "envs/tinygpt" and cfg.runner.kind == "local" and cfg.llm.provider == "auto"


def test_walks_up(tmp_path, monkeypatch):
    (tmp_path / ".autoresearch.toml").write_text("[runner]\nslots = 3\n")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert find_config() == tmp_path / ".autoresearch.toml"
    assert load_config().runner.slots == 3


@pytest.mark.parametrize("text,expect", [
    ("[runner]\nslot = 2\n", "unknown key 'runner.slot' (did you mean 'slots'?)"),
    ("[runer]\nslots = 2\n", "unknown key 'runer' (did you mean 'runner'?)"),
    ("[runner]\nslots = 'many'\n", "runner.slots: Input should be a valid integer"),
    ("[daemon]\ntick_s = [1]\n", "daemon.tick_s"),
    ("[llm]\napi_key = 'sk-123'\n", "secrets are read from the environment only"),
    ("[llm]\nprovider = 'gemini'\n", "llm.provider"),
    ("[runner\n", "invalid TOML"),
])
def test_bad_config_one_line_exit_2(tmp_path, text, expect):
    (tmp_path / ".autoresearch.toml").write_text(text)
    p = run_cli("status", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert expect in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "sk-123" not in p.stderr


def test_missing_config_file(tmp_path):
    p = run_cli("--config", str(tmp_path / "nope.toml"), "status", cwd=tmp_path)
    assert p.returncode == 2 and "config file not found" in p.stderr


def test_debug_shows_traceback(tmp_path):
    (tmp_path / ".autoresearch.toml").write_text("[runner]\nslot = 2\n")
    p = run_cli("--debug", "status", cwd=tmp_path)
    assert p.returncode != 0 and "Traceback" in p.stderr


def test_env_overrides(tmp_path):
    (tmp_path / "c.toml").write_text("[llm]\nprovider = 'replay'\n")
    cfg = load_config(tmp_path / "c.toml", environ={"AUTORESEARCHD_LLM__PROVIDER": "openai",
                                                     "AUTORESEARCHD_RUNNER__SLOTS": "4"})
    assert cfg.llm.provider == "openai" and cfg.runner.slots == 4
    with pytest.raises(ConfigError, match="unknown key 'runner.slotz'"):
        load_config(tmp_path / "c.toml", environ={"AUTORESEARCHD_RUNNER__SLOTZ": "4"})


def test_env_overrides_decode_lists_and_tables_and_name_a_bad_variable(tmp_path):
    """pydantic-settings reads the variables against Config's fields: a list arrives decoded from
    JSON, a nested table merges into the file's, and a typo or bad JSON names the variable."""
    (tmp_path / "c.toml").write_text("[runner]\nkind = 'slurm'\n[runner.slurm]\npartition = 'gpu'\n")
    cfg = load_config(tmp_path / "c.toml", environ={
        "AUTORESEARCHD_RUNNER__SLURM__TIME_MARGIN_S": "90", "OTHER__X": "1",
        "AUTORESEARCHD_LLM__ENSEMBLE": '[{"provider": "openai", "model": "m1"}]'})
    assert cfg.runner.slurm.partition == "gpu" and cfg.runner.slurm.time_margin_s == 90
    assert [m.model for m in cfg.llm.ensemble] == ["m1"]
    with pytest.raises(ConfigError, match=r"unknown key 'runer' \(from AUTORESEARCHD_RUNER__SLOTS\).*'runner'"):
        load_config(tmp_path / "c.toml", environ={"AUTORESEARCHD_RUNER__SLOTS": "4"})
    with pytest.raises(ConfigError, match="AUTORESEARCHD_LLM__ENSEMBLE: a list or table must be written as JSON"):
        load_config(tmp_path / "c.toml", environ={"AUTORESEARCHD_LLM__ENSEMBLE": "[oops"})
    with pytest.raises(ConfigError, match=r"runner.slots: Input should be a valid integer.*'many'"):
        load_config(tmp_path / "c.toml", environ={"AUTORESEARCHD_RUNNER__SLOTS": "many"})


def test_a_bad_override_is_blamed_on_its_variable_not_on_the_file(tmp_path):
    """The file is fine; the variable is not: the one-liner names the variable, so nobody searches the
    file for a key it does not hold. A bad key in the file is still the file's."""
    (tmp_path / "c.toml").write_text("[runner]\nslots = 2\n")
    with pytest.raises(ConfigError, match=r"^environment \(AUTORESEARCHD_RUNNER__SLOTZ\): unknown key 'runner.slotz'"):
        load_config(tmp_path / "c.toml", environ={"AUTORESEARCHD_RUNNER__SLOTZ": "3"})
    with pytest.raises(ConfigError, match=r"^environment \(AUTORESEARCHD_RUNNER__SLOTS\): runner.slots: .*'x'"):
        load_config(tmp_path / "c.toml", environ={"AUTORESEARCHD_RUNNER__SLOTS": "x"})
    (tmp_path / "c.toml").write_text("[runner]\nslotz = 2\n")
    with pytest.raises(ConfigError, match=r"c.toml: unknown key 'runner.slotz'"):
        load_config(tmp_path / "c.toml", environ={"AUTORESEARCHD_RUNNER__SLOTS": "3"})


def test_without_a_config_start_finds_the_packaged_env_from_any_directory(tmp_path, monkeypatch):
    """No config file: research.env is the packaged `tinygpt`, not a path relative to the cwd."""
    from autoresearchd.research import template_path
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None)
    assert cfg.research.env == "tinygpt"
    assert (template_path(cfg, cfg.research.env) / ".autoresearch.toml").is_file()


def test_pydantic_settings_reads_the_file_and_the_environment(tmp_path, monkeypatch):
    """Config is a pydantic-settings BaseSettings whose sources are init, the environment and the TOML
    file, first wins: a variable beats the file, the file beats the default, tables merge key by key.
    A Config built in code reads neither the environment nor a file."""
    from pydantic_settings import BaseSettings, EnvSettingsSource, TomlConfigSettingsSource

    from autoresearchd import config, defaults
    (tmp_path / "c.toml").write_text("[runner]\nslots = 2\nkind = 'slurm'\n[runner.slurm]\npartition = 'gpu'\n"
                                     "[daemon]\ntick_s = 5\n")
    env = {"AUTORESEARCHD_RUNNER__SLOTS": "4", "AUTORESEARCHD_RUNNER__SLURM__MAX_JOBS": "9"}
    cfg = load_config(tmp_path / "c.toml", environ=env)
    assert isinstance(cfg, BaseSettings)
    assert (cfg.runner.slots, cfg.daemon.tick_s, cfg.runner.kind) == (4, 5.0, "slurm")   # env > file > default
    assert (cfg.runner.slurm.partition, cfg.runner.slurm.max_jobs) == ("gpu", 9)        # merged key by key
    assert cfg.daemon.lease_ttl_s == config.Config.model_fields["daemon"].default_factory().lease_ttl_s
    token = config._LOADING.set((tmp_path / "c.toml", env))
    try:
        init, env_src, toml_src = config.Config.settings_customise_sources(config.Config, "init", None, None, None)
    finally:
        config._LOADING.reset(token)
    assert init == "init" and isinstance(env_src, EnvSettingsSource) and isinstance(toml_src, TomlConfigSettingsSource)
    monkeypatch.setenv("AUTORESEARCHD_RUNNER__SLOTS", "7")
    assert config.Config().runner.slots == defaults.LOCAL_SLOTS and config.Config(runner={"slots": 3}).runner.slots == 3
