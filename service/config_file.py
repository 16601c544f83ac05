"""Where settings come from besides the environment: a TOML file, named by `HSSTORE_CONFIG` or, for one Settings
being built, by `--config` (never written into the process environment, so one process can build several)."""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, TomlConfigSettingsSource

from service.errors import ConfigError

CONFIG_ENV = "HSSTORE_CONFIG"


# A config file named on the command line, for the one Settings being built (never the process environment)
_CONFIG_FILE: ContextVar[Path | None] = ContextVar("hsstore_config_file", default=None)


def _toml_source(settings_cls: type[BaseSettings], path: Path) -> TomlConfigSettingsSource:
    if not path.is_file():
        raise ConfigError(f"the config file {path} ({CONFIG_ENV} or --config) does not exist")
    try:
        return TomlConfigSettingsSource(settings_cls, toml_file=path)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"the config file {path} cannot be read: {exc.strerror}") from None


@contextlib.contextmanager
def config_file(path: Path | None) -> Iterator[None]:
    """`path` as the config file of the Settings built in the block (None: HSSTORE_CONFIG's, if any)."""
    token = _CONFIG_FILE.set(path)
    try:
        yield
    finally:
        _CONFIG_FILE.reset(token)


def config_file_sources(settings_cls: type[BaseSettings]) -> list[PydanticBaseSettingsSource]:
    """The TOML file's source, after the environment's, when a file is named."""
    config = _CONFIG_FILE.get() or os.environ.get(CONFIG_ENV)
    return [_toml_source(settings_cls, Path(config))] if config else []
