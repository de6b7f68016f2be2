"""Where a config comes from, and the checks made on its sources before anything is validated: the
TOML file (invalid TOML, a key that looks like a secret) and the `AUTORESEARCHD_<SECTION>__<KEY>`
environment variables (an unknown section, a list or table that is not JSON), each read by
pydantic-settings (daemon/config.py's `Config.settings_customise_sources` picks them). Apart from
config.py so that it holds the settings' shape alone; the sources know the model only as the
`settings_cls` pydantic-settings hands them.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic_settings import EnvSettingsSource, TomlConfigSettingsSource
from pydantic_settings.exceptions import SettingsError

from autoresearchd.keyerrors import suggest

ENV_PREFIX = "AUTORESEARCHD_"      # AUTORESEARCHD_<SECTION>__<KEY> overrides the file


class ConfigError(Exception):
    """A user-facing configuration problem: printed as one line, exit code 2."""


_SECRET_WORDS = ("api_key", "apikey", "secret", "password", "token")


def _check_no_secrets(data: Any, where: str = "") -> None:
    if isinstance(data, dict):
        for k, v in data.items():
            key = f"{where}.{k}" if where else str(k)
            if any(w in str(k).lower() for w in _SECRET_WORDS) and not str(k).endswith("_env") \
                    and k not in ("max_tokens", "thinking_budget"):
                raise ConfigError(f"{key}: secrets are read from the environment only "
                                  f"(for example ANTHROPIC_API_KEY); remove it from the config file")
            _check_no_secrets(v, key)


class TomlSource(TomlConfigSettingsSource):
    """The config file, read by pydantic-settings; invalid TOML or a key that looks like a secret is
    refused here, naming the file, before anything is validated."""

    def _read_file(self, file_path: Path) -> dict[str, Any]:
        try:
            data = super()._read_file(file_path)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file_path}: invalid TOML: {e}") from None
        _check_no_secrets(data)
        return data


class EnvSource(EnvSettingsSource):
    """`AUTORESEARCHD_<SECTION>__<KEY>` variables as a nested dict, read by pydantic-settings against
    Config's own fields, so a list or a table (hosts, prices, ensemble) arrives decoded from JSON.
    Only names with the `__` separator count: a whole section is never replaced by one variable.
    `environ` stands in for os.environ (tests pass a dict)."""

    def __init__(self, settings_cls, environ: Mapping[str, str]):
        self._ours = {k: environ[k] for k in _override_names(environ)}
        super().__init__(settings_cls)      # prefix, `__` and case from Config.model_config

    def _load_env_vars(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self._ours.items()}

    def __call__(self) -> dict[str, Any]:
        # pydantic-settings skips a variable that names no field; a typo in the section must still fail
        for name in sorted(self._ours):
            section = name[len(ENV_PREFIX):].split("__")[0].lower()
            if section not in self.settings_cls.model_fields or section == "path":
                raise ConfigError(f"environment: unknown key '{section}' (from {name})"
                                  f"{suggest(self.settings_cls, (section,)) if section != 'path' else ''}")
        try:
            return super().__call__()
        except SettingsError:
            # pydantic-settings names the section only; say which variables could not be read as JSON
            bad = [n for n, v in sorted(self._ours.items()) if v.lstrip().startswith(("[", "{")) and not _is_json(v)]
            raise ConfigError(f"environment override {', '.join(bad) or '(' + ', '.join(sorted(self._ours)) + ')'}: "
                              "a list or table must be written as JSON, e.g. '[{\"name\": \"gpu1\"}]'") from None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def _override_names(environ: dict) -> list[str]:
    """The variables that override the file: `AUTORESEARCHD_<SECTION>__<KEY>`, sorted."""
    return sorted(k for k in environ if k.upper().startswith(ENV_PREFIX) and "__" in k)


def env_var_at(loc: tuple, environ: dict) -> str | None:
    """The override variable that set the config key at `loc` (or a table holding it), if one did."""
    want = tuple(str(x).lower() for x in loc)
    for name in _override_names(environ):
        keys = tuple(name[len(ENV_PREFIX):].lower().split("__"))
        if want[:len(keys)] == keys or keys[:len(want)] == want:
            return name
    return None
