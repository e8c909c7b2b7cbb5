"""References resolved live at recall time: the registry, stale fallbacks, deref logging, FileResolver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests import raw

from engramdb import DynamicMemoryEngine, NotFound, ValidationError
from engramdb.agent import Agent
from engramdb.memories.model import Channel, MemoryRef
from engramdb.memories.prospective import intend
from engramdb.memories.references import FileResolver, ReferenceResolvers, ResolvedRef, resolve_refs
from engramdb.retrieval.results import Recall

START = 1_764_000_000.0


@pytest.fixture
def tickets() -> dict[str, str]:
    return {"T-7": "Login broken for SSO users (assigned: dana)"}


@pytest.fixture
def resolvers(tickets: dict[str, str]) -> ReferenceResolvers:
    reg = ReferenceResolvers()
    reg.register("ticket", lambda key: tickets[key])
    return reg


def _ticket_memory(me: Agent) -> str:
    ref = MemoryRef("ticket", "T-7", "Login broken (unassigned)", START)
    return me.remember("The login bug is tracked in a ticket", refs=[ref]).id


def _deref(me: Agent, memory_id: str) -> list[tuple[str | None, str | None]]:
    return [(a.query, a.recall_id) for a in me.accesses(memory_id) if a.channel is Channel.DEREF]


def _access_count(eng: DynamicMemoryEngine) -> int:
    return int(raw.scalar(eng, "SELECT count(*) FROM engram_access"))


# -- live resolution --------------------------------------------------------------------------


def test_recall_answers_from_live_state(me: Agent, resolvers: ReferenceResolvers, tickets: dict[str, str]) -> None:
    mid = _ticket_memory(me)
    recall = me.recall("login bug ticket", k=1)
    assert recall.memories[0].id == mid and recall[0].notes == ()
    strength = me.get(mid, touch=False).strength

    live = resolve_refs(me, recall, resolvers)
    assert live[0].notes == ("ref ticket:T-7 (live): Login broken for SSO users (assigned: dana)",)
    assert live.recall_id == recall.recall_id and live.query == recall.query and live[0].score == recall[0].score
    assert "assigned: dana" in live.as_evidence(400)

    tickets["T-7"] = "Fixed in 2.4.1"  # the world moves on; the memory does not need to
    assert resolve_refs(me, recall, resolvers)[0].notes == ("ref ticket:T-7 (live): Fixed in 2.4.1",)
    assert _deref(me, mid) == [("ref ticket:T-7 live", recall.recall_id)] * 2
    assert me.get(mid, touch=False).strength == strength  # resolving is logged, not a second use


def test_a_failing_resolver_falls_back_to_the_preview_marked_stale(
    me: Agent, resolvers: ReferenceResolvers, tickets: dict[str, str]
) -> None:
    mid = _ticket_memory(me)
    tickets.clear()
    note = resolve_refs(me, me.recall("login bug ticket", k=1), resolvers)[0].notes[0]
    assert note == (
        "ref ticket:T-7 (stale preview, captured 2025-11-24T16:00:00Z; resolver failed: KeyError: 'T-7'): "
        "Login broken (unassigned)"
    )
    assert _deref(me, mid)[0][0] == "ref ticket:T-7 stale"


def test_a_missing_resolver_is_stale_too(me: Agent) -> None:
    me.remember("The plan lives in a doc", refs=[MemoryRef("doc", "plan", "v1 of the plan")])
    note = resolve_refs(me, me.recall("plan doc", k=1), ReferenceResolvers())[0].notes[0]
    assert note == "ref doc:plan (stale preview, capture time unknown; no resolver for kind 'doc'): v1 of the plan"


@pytest.mark.parametrize(
    ("result", "reason"), [(42, "resolver returned int, not text"), (None, "resolver returned NoneType, not text")]
)
def test_a_resolver_returning_non_text_is_stale(me: Agent, result: object, reason: str) -> None:
    reg = ReferenceResolvers({"doc": lambda key: result})  # type: ignore[dict-item, return-value]
    me.remember("The plan lives in a doc", refs=[MemoryRef("doc", "plan", "v1")])
    assert reason in resolve_refs(me, me.recall("plan doc", k=1), reg)[0].notes[0]


def test_resolver_objects_long_text_and_several_refs(me: Agent) -> None:
    class Wiki:
        def resolve(self, key: str) -> str:
            return f"page {key}: " + "x" * 5000

    reg = ReferenceResolvers({"wiki": Wiki(), "doc": str.upper})
    mid = me.remember(
        "Onboarding is in the wiki and a doc", refs=[MemoryRef("wiki", "onboarding"), MemoryRef("doc", "start")]
    ).id
    notes = resolve_refs(me, me.recall("onboarding wiki", k=1), reg, max_chars=50)[0].notes
    assert notes[0].startswith("ref wiki:onboarding (live, truncated): page onboarding: xxx") and notes[0].endswith("…")
    assert notes[1] == "ref doc:start (live): START"
    assert [q for q, _ in _deref(me, mid)] == ["ref wiki:onboarding live", "ref doc:start live"]


def test_trigger_refs_and_ref_less_hits_are_left_alone(eng: DynamicMemoryEngine, me: Agent) -> None:
    intend(me, "Ask about the login ticket", cue="login ticket")
    recall = me.recall("login ticket", k=3)
    before = _access_count(eng)
    assert resolve_refs(me, recall, ReferenceResolvers()) == recall
    assert _access_count(eng) == before


def test_hits_the_agent_cannot_see_are_not_found_and_nothing_is_logged(
    eng: DynamicMemoryEngine, me: Agent, resolvers: ReferenceResolvers
) -> None:
    bob = eng.agent("bob")
    bob.remember("Bob's login ticket", refs=[MemoryRef("ticket", "T-7", "secret")])
    theirs = bob.recall("login ticket", k=1)
    calls: list[str] = []

    def spy_resolve(key: str) -> str:
        calls.append(key)
        return "x"

    spy = ReferenceResolvers({"ticket": spy_resolve})
    before = _access_count(eng)
    with pytest.raises(NotFound):
        resolve_refs(me, theirs, spy)
    assert calls == [] and _access_count(eng) == before


def test_bad_arguments(me: Agent, resolvers: ReferenceResolvers) -> None:
    recall = me.recall("anything", k=1)
    with pytest.raises(ValidationError):
        resolve_refs(me, "not a recall", resolvers)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        resolve_refs(me, recall, {"ticket": str})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        resolve_refs(me, recall, resolvers, max_chars=0)
    assert isinstance(resolve_refs(me, recall, resolvers), Recall)


# -- the registry -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["", "File", "has space", "1file", "x" * 33, "trigger", 3])
def test_registry_refuses_bad_kinds(kind: object) -> None:
    with pytest.raises(ValidationError):
        ReferenceResolvers().register(kind, str)  # type: ignore[arg-type]


def test_registry_register_replace_unregister() -> None:
    reg = ReferenceResolvers()
    reg.register("doc", str.upper)
    with pytest.raises(ValidationError, match="already registered"):
        reg.register("doc", str.lower)
    reg.register("doc", str.lower, replace=True)
    assert reg.resolve(MemoryRef("doc", "ABC")) == ResolvedRef(MemoryRef("doc", "ABC"), "abc", True)
    with pytest.raises(ValidationError, match="resolve\\(key\\) method or is a callable"):
        reg.register("num", 42)  # type: ignore[arg-type]
    assert reg.kinds() == ("doc",) and "doc" in reg and "num" not in reg
    reg.unregister("doc")
    reg.unregister("doc")
    assert reg.kinds() == () and reg.get("doc") is None
    assert reg.resolve(MemoryRef("trigger", "event:x")).live is False


# -- FileResolver -----------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "plan.md").write_text("Ship v2 on Friday.\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("top secret", encoding="utf-8")
    return root


def test_file_resolver_reads_files_under_its_root(workspace: Path) -> None:
    files = FileResolver(workspace)
    assert files.resolve("notes/plan.md") == "Ship v2 on Friday.\n"
    assert files.resolve("./notes//plan.md") == "Ship v2 on Friday.\n"
    os.symlink(workspace / "notes" / "plan.md", workspace / "plan-link.md")  # a symlink that stays inside is fine
    assert files.resolve("plan-link.md") == "Ship v2 on Friday.\n"


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("../secret.txt", "contains '..'"),
        ("notes/../../secret.txt", "contains '..'"),
        ("notes/../plan.md", "contains '..'"),  # refused even when it would stay inside
        ("..\\secret.txt", "contains '..'"),
        ("/etc/passwd", "is absolute"),
        ("\\\\server\\share\\x", "is absolute"),
        ("C:\\Windows\\win.ini", "is absolute"),
        ("c:secret.txt", "is absolute"),
        ("", "non-empty relative path"),
        ("notes/\x00plan.md", "NUL"),
    ],
)
def test_file_resolver_refuses_keys_that_escape(workspace: Path, key: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        FileResolver(workspace).resolve(key)


def test_file_resolver_refuses_symlinks_pointing_outside(tmp_path: Path, workspace: Path) -> None:
    os.symlink(tmp_path / "secret.txt", workspace / "escape.txt")
    os.symlink(tmp_path, workspace / "up")
    os.symlink("/etc/passwd", workspace / "passwd")
    files = FileResolver(workspace)
    for key in ("escape.txt", "up/secret.txt", "passwd"):
        with pytest.raises(ValidationError, match="outside the resolver root"):
            files.resolve(key)


def test_file_resolver_caps_size_and_refuses_what_is_not_text(workspace: Path) -> None:
    (workspace / "big.txt").write_text("é" * 100, encoding="utf-8")  # 200 bytes
    (workspace / "blob.bin").write_bytes(b"\xff\xfe\x00\x01" * 4)
    files = FileResolver(workspace, max_bytes=11)
    assert files.resolve("big.txt") == "é" * 5 + "\n[… cut at 11 bytes]"  # never half a character
    with pytest.raises(ValidationError, match="not utf-8 text"):
        files.resolve("blob.bin")
    with pytest.raises(ValidationError, match="not a regular file"):
        files.resolve("notes")
    with pytest.raises(FileNotFoundError, match=r"cannot open file reference 'nope\.md'") as err:
        files.resolve("nope.md")
    assert str(workspace) not in str(err.value)  # the host path stays out of the message
    if hasattr(os, "mkfifo"):
        os.mkfifo(workspace / "pipe")
        with pytest.raises(ValidationError, match="not a regular file"):
            files.resolve("pipe")  # and it does not block


@pytest.mark.parametrize("kwargs", [{"max_bytes": 0}, {"max_bytes": True}, {"encoding": "no-such-codec"}])
def test_file_resolver_arguments(workspace: Path, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        FileResolver(workspace, **kwargs)  # type: ignore[arg-type]


def test_file_resolver_root_must_be_a_directory(workspace: Path) -> None:
    with pytest.raises(ValidationError, match="does not exist"):
        FileResolver(workspace / "missing")
    with pytest.raises(ValidationError, match="not a directory"):
        FileResolver(workspace / "notes" / "plan.md")


def test_file_refs_resolve_live_in_recall_and_escapes_fall_back_stale(me: Agent, workspace: Path) -> None:
    reg = ReferenceResolvers({"file": FileResolver(workspace)})
    me.remember(
        "The release plan is written down in the plan file",
        refs=[MemoryRef("file", "notes/plan.md", "Ship v2 on Thursday."), MemoryRef("file", "../secret.txt", "?")],
    )
    recall = me.recall("release plan file", k=1)
    live, escaped = resolve_refs(me, recall, reg)[0].notes
    assert live == "ref file:notes/plan.md (live): Ship v2 on Friday.\n"
    assert escaped.startswith("ref file:../secret.txt (stale preview") and "contains '..'" in escaped
    assert "top secret" not in escaped
    (workspace / "notes" / "plan.md").write_text("Ship v2 next Monday.", encoding="utf-8")
    assert "next Monday" in resolve_refs(me, recall, reg)[0].notes[0]
    text = resolve_refs(me, recall, reg).as_evidence(500)
    assert "next Monday" in text and "UNTRUSTED EVIDENCE END" in text


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_followed(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "plan.md").write_text("exfiltrated", encoding="utf-8")
    files = FileResolver(workspace)
    checked = FileResolver.path_for

    def check_then_swap(self: FileResolver, key: str) -> Path:
        path = checked(self, key)  # the check passes on the real directory ...
        (workspace / "notes").rename(workspace / "notes-old")
        os.symlink(outside, workspace / "notes")  # ... which is then replaced by a symlink out of the root
        return path

    monkeypatch.setattr(FileResolver, "path_for", check_then_swap)
    with pytest.raises(OSError, match=r"cannot open file reference 'notes/plan\.md'"):
        files.resolve("notes/plan.md")


def test_a_slow_resolver_times_out_to_its_preview_and_a_stuck_pool_fails_fast() -> None:
    import threading
    import time

    release = threading.Event()
    reg = ReferenceResolvers(timeout=0.05)
    reg.register("ticket", lambda key: "late" if release.wait(10) else "never")
    ref = MemoryRef("ticket", "T-7", "Login broken (unassigned)", START)
    try:
        got = reg.resolve(ref)
        assert not got.live and got.text == "Login broken (unassigned)"
        assert got.reason == "resolver timed out after 0.05 s"
        for _ in range(6):  # more calls than background threads: the later ones time out too
            assert reg.resolve(ref).reason == "resolver timed out after 0.05 s"
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while reg.resolve(ref).text != "late" and time.monotonic() < deadline:
        time.sleep(0.01)  # the stuck calls finish once released; then the pool answers again
    assert reg.resolve(ref).live
    assert ReferenceResolvers(timeout=None).timeout is None
    for bad in (0, -1, True, "5", 10_000):
        with pytest.raises(ValidationError, match="timeout must be seconds"):
            ReferenceResolvers(timeout=bad)  # type: ignore[arg-type]
