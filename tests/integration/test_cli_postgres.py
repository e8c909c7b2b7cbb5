"""The command line on a PostgreSQL store (``--db postgresql://…`` or ``ENGRAMDB_URL``)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from engramdb.cli import Exit, cli

pytestmark = pytest.mark.postgres_only


def test_the_cli_opens_a_postgresql_url(make_engine: Any) -> None:
    url = make_engine.location("cli")
    runner = CliRunner()
    base = ["--db", url, "--agent", "alice", "--embedder", "fake", "--json"]
    assert runner.invoke(cli, [*base, "remember", "The release train leaves on Thursdays"]).exit_code == Exit.OK
    out = runner.invoke(cli, [*base, "recall", "release train"])
    assert out.exit_code == Exit.OK and "Thursdays" in out.stdout
    via_env = runner.invoke(cli, ["--agent", "alice", "--embedder", "fake", "stats"], env={"ENGRAMDB_URL": url})
    assert via_env.exit_code == Exit.OK
