"""Team memory configuration: one frozen object, one loader.

Precedence, lowest first: defaults < the ``[memory]`` table of a TOML file < environment variables
(``ENGRAMDB_DB_PATH``, ``ENGRAMDB_ENABLE_EMBEDDINGS``, … one per key) < keyword arguments. Every key is documented on `TeamMemoryConfig`; an unknown
key anywhere is a `ConfigError` that names it.

Example ``engramdb.toml``::

    [memory]
    db_path           = ".engramdb/memory.db"
    enable_embeddings = true
    # or, for a team on PostgreSQL (wins over db_path; ENGRAMDB_URL in the environment):
    # url = "postgresql://engram@db.internal/team"
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engramdb.errors import ConfigError
from engramdb.memories.model import check_path


@dataclass(frozen=True, slots=True)
class TeamMemoryConfig:
    """How a team's memory engine is opened.

    Attributes:
        db_path: the SQLite file every agent of the team shares.
        url: a ``postgresql://`` (or ``postgres://``) URL of the PostgreSQL database the team shares
            instead (needs the ``postgres`` extra); when given it wins over `db_path`.
        enable_embeddings: rank retrieved rows semantically too (needs the ``memory`` extra).
        busy_timeout: seconds a writer waits for another writer.
        statement_timeout: seconds one scope statement may run.
        synchronous: SQLite ``synchronous`` setting: ``NORMAL`` or ``FULL``.
    """

    db_path: Path = field(default_factory=lambda: Path(".engramdb/memory.db"))
    url: str | None = None
    enable_embeddings: bool = False
    busy_timeout: float = 30.0
    statement_timeout: float = 5.0
    synchronous: str = "NORMAL"

    def __post_init__(self) -> None:
        # Built directly (not by load_config), the values get the same checks and coercions.
        for name in _FIELDS:
            object.__setattr__(self, name, _coerce(name, getattr(self, name), "TeamMemoryConfig"))


_FIELDS = {f.name: f for f in dataclasses.fields(TeamMemoryConfig)}
_ENV_PREFIX = "ENGRAMDB_"


def _coerce(key: str, value: Any, source: str) -> Any:
    kind = {
        "db_path": Path,
        "url": "url",
        "enable_embeddings": bool,
        "busy_timeout": float,
        "statement_timeout": float,
        "synchronous": str,
    }[key]
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.strip().lower() in ("1", "true", "yes", "on")
        raise ConfigError(f"{source}: {key} must be true or false, got {value!r}")
    if kind is float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: {key} must be a number of seconds, got {value!r}") from None
        if not math.isfinite(number) or number <= 0:
            raise ConfigError(f"{source}: {key} must be a positive number of seconds, got {value!r}")
        return number
    if kind == "url":
        if value is None:
            return None  # no URL: the team's store is db_path
        if not isinstance(value, str) or value.split("://", 1)[0].lower() not in ("postgresql", "postgres"):
            raise ConfigError(f"{source}: {key} must be a postgresql:// URL, got {value!r}")
        return value
    if kind is Path:
        if not isinstance(value, (str, os.PathLike)) or not str(value):
            raise ConfigError(f"{source}: {key} must be a file path, got {value!r}")
        return Path(value)
    if not isinstance(value, str) or value.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        raise ConfigError(f"{source}: {key} must be one of NORMAL, FULL, EXTRA, OFF, got {value!r}")
    return value.upper()


def _apply(values: dict[str, Any], updates: Mapping[str, Any], source: str) -> None:
    for key, value in updates.items():
        if key not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise ConfigError(f"{source}: unknown key {key!r} (known keys: {known})")
        values[key] = _coerce(key, value, source)


def load_config(
    toml_path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> TeamMemoryConfig:
    """Build a `TeamMemoryConfig` from defaults, a TOML file's ``[memory]`` table, env and arguments.

    A relative ``db_path`` in a TOML file is relative to that file's directory.
    """
    values: dict[str, Any] = {}
    if env is not None and not isinstance(env, Mapping):
        raise ConfigError(f"env must be a mapping of variable names to strings, or None, got {type(env).__name__}")
    if toml_path is not None:
        path = Path(check_path("toml_path", toml_path, ConfigError))
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not valid TOML (not UTF-8 text)") from None
        except OSError as exc:
            raise ConfigError(
                f"cannot read the config file {path} ({exc.strerror}); pass a readable TOML file"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        section = data.get("memory", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [memory] must be a table")
        _apply(values, section, f"{path} [memory]")
        if "db_path" in values and not values["db_path"].is_absolute():
            values["db_path"] = path.parent / values["db_path"]
    environ = os.environ if env is None else env
    # Only this config's own names are read from the environment; other ENGRAMDB_* variables
    # (benchmark or tool settings) are not configuration keys.
    from_env = {key: environ[_ENV_PREFIX + key.upper()] for key in _FIELDS if _ENV_PREFIX + key.upper() in environ}
    _apply(values, from_env, "environment")
    _apply(values, overrides, "arguments")
    return TeamMemoryConfig(**values)
