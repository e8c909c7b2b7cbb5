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


def test_init_prints_the_url_without_its_password_and_the_new_commands_run(make_engine: Any) -> None:
    from urllib.parse import urlsplit, urlunsplit

    given = urlsplit(make_engine.location("cli-init"))
    # the test server trusts its local users, so any password logs in: one that must not be printed
    url = urlunsplit(given._replace(netloc=f"{given.username}:pw-s3cret@{given.netloc.rsplit('@', 1)[-1]}"))
    base = ["--db", url, "--agent", "alice", "--embedder", "fake"]
    out = CliRunner().invoke(cli, [*base, "init"])
    assert out.exit_code == Exit.OK and out.stdout.startswith("ready: postgresql://"), out.stdout
    shown = out.stdout.removeprefix("ready: ").strip()
    assert "pw-s3cret" not in out.output and shown.split("@")[-1] == url.split("@")[-1]
    a = CliRunner().invoke(cli, [*base, "remember", "Alice is allergic to peanuts"]).stdout.strip()
    b = CliRunner().invoke(cli, [*base, "remember", "Alice carries an epipen"]).stdout.strip()
    assert CliRunner().invoke(cli, [*base, "link", a, b, "--type", "supports"]).exit_code == Exit.OK
    assert CliRunner().invoke(cli, [*base, "update", a, "--importance", "9"]).exit_code == Exit.OK
    shown_a = CliRunner().invoke(cli, [*base, "show", a]).stdout
    assert "importance: 9 (caller)" in shown_a and "-supports 1->" in shown_a
    assert "1-2 of 2" in CliRunner().invoke(cli, [*base, "list"]).stdout


def test_the_demo_runs_on_a_postgresql_url(make_engine: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from engramdb.demo import main

    url = make_engine.location("demo")
    main([url])
    main([url])  # and again on the same database: its tables are there already
    out = capsys.readouterr().out
    assert "AuthorizerError" in out or "refused" in out.lower()
    assert "the researcher's private hunch is invisible to the writer" in out
    assert "database: postgresql://" in out
