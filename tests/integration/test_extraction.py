"""LLM extraction on the backend under test: the real chat client against a local scripted
OpenAI-compatible server; the queue, the worker, the rules of an answer, corrections, failures,
crashes, confidentiality, reverting and erasure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from engramdb import Confidentiality, DynamicMemoryEngine, EdgeType, MemoryType
from engramdb.agent import Agent
from engramdb.errors import NotFound
from engramdb.llm import ChatClient, Decision, ExtractionWorker, LLMExtractor, LLMReasoner, LLMReconciler
from engramdb.llm.scripted import Answer, ScriptedChatServer, rule_extractor_script
from engramdb.memories.model import Memory
from engramdb.testing import FixedClock, fake_embedder

DAY = 86400.0


@pytest.fixture
def server() -> Iterator[ScriptedChatServer]:
    with ScriptedChatServer(rule_extractor_script) as s:
        yield s


@pytest.fixture
def eng(make_engine: Callable[..., DynamicMemoryEngine]) -> DynamicMemoryEngine:
    return make_engine(memory_embedder=fake_embedder(), queue_extraction=True)


@pytest.fixture
def me(eng: DynamicMemoryEngine) -> Agent:
    return eng.agent("assistant")


def llm(server: ScriptedChatServer, **options: Any) -> LLMExtractor:
    options.setdefault("timeout", 5.0)
    options.setdefault("retries", 0)
    return LLMExtractor(ChatClient(server.url, "scripted", sleep=lambda s: None, **options))


def worker(eng: DynamicMemoryEngine, extractor: Any, **options: Any) -> ExtractionWorker:
    return eng.extraction_worker(extractor, **options)


def say(me: Agent, text: str, *, session: str = "chat-1", name: str = "maya", **options: Any) -> list[Memory]:
    return me.remember(messages=[{"role": "user", "name": name, "content": text}], session=session, **options)


def facts(me: Agent, query: str = "where does maya live", **options: Any) -> list[str]:
    return [h.memory.content for h in me.recall(query, types=["info"], k=10, **options)]


class Scripted:
    """An extractor answering with given decisions (ids filled in by a function of the input)."""

    name = "scripted-extractor@test"

    def __init__(self, decide: Callable[[Sequence[Memory], Sequence[Memory]], list[Decision]]) -> None:
        self.decide = decide
        self.calls: list[tuple[list[str], list[str]]] = []

    def extract(self, turns: Sequence[Memory], known: Sequence[Memory]) -> list[Decision]:
        self.calls.append(([t.id for t in turns], [k.id for k in known]))
        return self.decide(turns, known)


# -- the queue -------------------------------------------------------------------------------------


def test_remember_queues_the_turns_and_never_calls_the_model(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer
) -> None:
    turns = me.remember(
        messages=[{"role": "user", "content": "I live in Paris"}, {"role": "assistant", "content": "Noted."}],
        session="chat-1",
    )
    assert server.requests == []
    (job,) = eng.pending()
    assert job.status == "pending" and job.attempts == 0 and job.agent == "assistant"
    assert job.memory_ids == tuple(t.id for t in turns)
    assert me.remember(messages=[{"role": "user", "content": "hi"}], extract=False) and len(eng.pending()) == 1


def test_an_engine_without_extraction_queues_nothing_unless_asked(make_engine: Callable[..., Any]) -> None:
    plain = make_engine(memory_embedder=fake_embedder())
    a = plain.agent("a")
    a.remember(messages=[{"role": "user", "content": "I live in Rome"}])
    assert plain.pending() == []
    a.remember(messages=[{"role": "user", "content": "I live in Oslo"}], extract=True)
    assert len(plain.pending()) == 1


def test_facts_are_derived_from_their_turns_in_their_session(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer
) -> None:
    turns = say(me, "I live in Paris", metadata={"project": "trip"})
    report = worker(eng, llm(server)).drain()
    assert (report.claimed, report.done, report.added) == (1, 1, 1)
    (hit,) = me.recall("maya lives", types=["info"])
    fact = hit.memory
    assert fact.content == "maya lives in Paris" and fact.type is MemoryType.INFO
    assert fact.session == "chat-1"
    assert fact.metadata == {"project": "trip", "extracted_by": "extractor:scripted@extract-v1"}
    assert fact.entities == ("maya",) and fact.valid_from == turns[0].created_at
    derived = [e for e in me.edges(fact.id) if e.type is EdgeType.DERIVED_FROM]
    assert [(e.source, e.target) for e in derived] == [(fact.id, turns[0].id)]
    assert eng.pending() == []
    (done,) = eng.pending(statuses=["done"])
    assert done.decisions[0]["op"] == "call" and done.decisions[0]["turns"] == [turns[0].id]
    assert done.decisions[1] == {"op": "add", "sources": [turns[0].id], "by": "extractor:scripted@extract-v1",
                                 "memory": fact.id}  # fmt: skip


def test_a_correction_supersedes_and_as_of_still_sees_the_old_fact(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer, clock: FixedClock
) -> None:
    w = worker(eng, llm(server))
    (paris_turn,) = say(me, "I live in Paris", session="s1")
    w.drain()
    clock.advance(30 * DAY)
    (berlin_turn,) = say(me, "I moved to Berlin", session="s2")
    assert w.drain().updated == 1
    assert facts(me) == ["maya lives in Berlin"]
    assert facts(me, as_of=paris_turn.created_at + DAY) == ["maya lives in Paris"]
    # superseded, not deleted: the Paris fact is still there, its validity closed when Berlin was said
    (paris,) = [m for m in me.memories(types=["info"], include_archived=True) if "Paris" in m.content]
    assert paris.valid_to == berlin_turn.created_at
    berlin = me.recall("maya lives", types=["info"])[0].memory
    assert any(e.type is EdgeType.REFINES and e.target == paris.id for e in me.edges(berlin.id))
    # the known fact was shown to the model by an alias, and the decision names the real ids
    assert '"id": "f1", "text": "maya lives in Paris"' in server.requests[-1]["messages"][1]["content"]
    ex = me.explain("where does maya live", types=["info"])
    assert any("update" in line and paris.id in line for line in ex.origins[berlin.id])


def test_a_delete_closes_validity_and_erases_nothing(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer, clock: FixedClock
) -> None:
    w = worker(eng, llm(server))
    say(me, "I like jazz")
    w.drain()
    clock.advance(DAY)
    say(me, "I no longer like jazz")
    assert w.drain().deleted == 1
    assert facts(me, "what music does maya like") == []
    (jazz,) = [m for m in me.memories(types=["info"], include_archived=True) if "jazz" in m.content]
    assert jazz.valid_to is not None and me.get(jazz.id).content == "maya likes jazz"


# -- the rules of an answer ------------------------------------------------------------------------


def test_an_answer_naming_an_id_outside_its_input_is_rejected_whole(
    eng: DynamicMemoryEngine, me: Agent, clock: FixedClock
) -> None:
    other = me.remember("maya has a dog", type="info")  # never shown to the extractor as known
    say(me, "I live in Paris")

    def decide(turns: Sequence[Memory], known: Sequence[Memory]) -> list[Decision]:
        return [Decision("add", "maya lives in Paris", (turns[0].id,)),
                Decision("delete", None, (turns[0].id,), other.id if not known else "x:none")]  # fmt: skip

    report = worker(eng, Scripted(decide), max_attempts=2).drain()
    assert (report.done, report.retried) == (0, 1)
    assert facts(me) == ["maya has a dog"]  # the valid add was not applied either
    assert me.get(other.id).valid_to is None
    (job,) = eng.pending()
    assert job.status == "pending" and job.attempts == 1 and "rejected" in (job.last_error or "")


def test_the_shipped_extractor_rejects_an_alias_it_did_not_give(
    eng: DynamicMemoryEngine, me: Agent, clock: FixedClock
) -> None:
    bad = {"decisions": [{"op": "ADD", "fact": "maya lives in Paris", "id": None, "sources": ["t1"]},
                         {"op": "UPDATE", "fact": "maya lives in Rome", "id": "f7", "sources": ["t1"]}]}  # fmt: skip
    with ScriptedChatServer(lambda body: Answer(content=bad)) as server:
        say(me, "I live in Paris")
        report = worker(eng, llm(server)).drain()
    assert report.retried == 1 and facts(me) == []
    assert "ids it was not given (f7)" in (eng.pending()[0].last_error or "")


@pytest.mark.parametrize(
    "failure",
    [Answer(status=500), Answer(status=429), Answer(text='{"decisions": [ {"op"'), Answer(text="sure! here you go")],
)
def test_a_failed_call_keeps_the_job_queued_and_a_later_attempt_applies_it(
    eng: DynamicMemoryEngine, me: Agent, clock: FixedClock, failure: Answer
) -> None:
    calls = 0

    def script(body: Mapping[str, Any]) -> Answer:
        nonlocal calls
        calls += 1
        return failure if calls == 1 else rule_extractor_script(body)

    with ScriptedChatServer(script) as server:
        (turn,) = say(me, "I live in Paris")
        w = worker(eng, llm(server), retry_base=10.0)
        assert w.drain().retried == 1
        (job,) = eng.pending()
        assert job.attempts == 1 and job.not_before == clock.now + 10.0 and job.last_error
        assert me.get(turn.id).content == "maya: I live in Paris"  # the turn is stored all along
        assert w.drain().claimed == 0  # not due yet
        clock.advance(11)
        assert w.drain().added == 1
    assert facts(me) == ["maya lives in Paris"] and eng.pending() == []


def test_a_timeout_is_a_failed_attempt(eng: DynamicMemoryEngine, me: Agent, clock: FixedClock) -> None:
    with ScriptedChatServer(lambda body: Answer(content={"decisions": []}, delay=1.0)) as server:
        say(me, "I live in Paris")
        report = worker(eng, llm(server, timeout=0.2)).drain()
    assert report.retried == 1 and "did not answer within" in report.errors[0]


def test_attempts_run_out_to_failed_visible_and_requeue_tries_again(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer, clock: FixedClock
) -> None:
    with ScriptedChatServer(lambda body: Answer(status=500)) as down:
        say(me, "I live in Paris")
        w = worker(eng, llm(down), max_attempts=3, retry_base=1.0)
        for _ in range(3):
            w.drain()
            clock.advance(10)
    (job,) = eng.pending()
    assert job.status == "failed" and job.attempts == 3 and "HTTP 500" in (job.last_error or "")
    assert eng.requeue() == 1
    assert worker(eng, llm(server)).drain().added == 1
    assert eng.pending() == [] and facts(me) == ["maya lives in Paris"]


# -- crashes and concurrent workers ----------------------------------------------------------------


def test_a_worker_that_dies_after_claiming_loses_nothing_and_duplicates_nothing(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer, clock: FixedClock
) -> None:
    say(me, "I live in Paris")
    with eng._backend.atomic():
        (claimed,) = eng._backend.jobs.claim(worker="dead", now=clock.now, lease=60, limit=5)
    w = worker(eng, llm(server))
    assert w.drain().claimed == 0  # its lease holds
    clock.advance(61)
    assert w.drain().added == 1
    # the dead worker's late finish is refused: the job is no longer its own
    assert not eng._backend.jobs.finish(claimed.tenant, claimed.job_id, "dead", clock.now, [])
    assert facts(me) == ["maya lives in Paris"]


def test_a_slow_worker_whose_lease_ran_out_writes_nothing(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer, clock: FixedClock
) -> None:
    say(me, "I live in Paris")
    fast = worker(eng, llm(server), worker_id="fast")
    shipped = llm(server)

    class Slow:
        name = shipped.name

        def extract(self, turns: Sequence[Memory], known: Sequence[Memory]) -> Sequence[Decision]:
            clock.advance(200)  # past the lease: another worker takes the job meanwhile
            assert fast.drain().added == 1
            return shipped.extract(turns, known)

    report = worker(eng, Slow(), worker_id="slow", lease=100).drain()
    assert report.lost == 1 and report.done == 0
    assert facts(me) == ["maya lives in Paris"]  # once


def test_two_worker_threads_run_each_job_once(eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer) -> None:
    for i in range(12):
        say(me, f"I like sport{i}", session=f"s{i}")
    workers = [worker(eng, llm(server), worker_id=f"w{i}", batch=1) for i in range(2)]
    threads = [threading.Thread(target=w.drain) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert eng.pending() == [] and len(eng.pending(statuses=["done"])) == 12
    liked = [m.content for m in me.memories(types=["info"])]
    assert sorted(liked) == sorted(f"maya likes sport{i}" for i in range(12))


def test_the_engine_runs_its_extractor_in_a_background_thread(
    make_engine: Callable[..., DynamicMemoryEngine], server: ScriptedChatServer
) -> None:
    eng = make_engine(memory_embedder=fake_embedder(), extractor=llm(server))
    me = eng.agent("assistant")
    t0 = time.perf_counter()
    say(me, "I live in Paris")
    assert time.perf_counter() - t0 < 5  # the call returned; the model ran elsewhere
    deadline = time.monotonic() + 10
    while eng.pending() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert eng.pending() == [] and facts(me) == ["maya lives in Paris"]
    eng.close()
    assert eng.worker is not None and eng.worker._thread is None


# -- confidentiality -------------------------------------------------------------------------------


def test_turns_above_llm_cap_are_never_sent_and_facts_keep_their_sources_level(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer
) -> None:
    me.remember(
        messages=[{"role": "user", "name": "maya", "content": "I live in Paris"},
                  {"role": "user", "name": "maya", "content": "I like my secret code 4417"}],
        confidentiality=Confidentiality.INTERNAL,
    )  # fmt: skip
    me.remember(
        messages=[{"role": "user", "name": "maya", "content": "I like the diagnosis they gave me"}],
        confidentiality=Confidentiality.CONFIDENTIAL,
    )
    report = worker(eng, llm(server), llm_cap=Confidentiality.INTERNAL).drain()
    assert report.done == 2
    sent = " ".join(m["content"] for r in server.requests for m in r["messages"])
    assert "diagnosis" not in sent and "Paris" in sent
    assert len(server.requests) == 1  # the job of only confidential turns is done without a call
    got = {m.content: m.confidentiality for m in me.memories(types=["info"])}
    assert got == {"maya lives in Paris": Confidentiality.INTERNAL,
                   "maya likes my secret code 4417": Confidentiality.INTERNAL}  # fmt: skip
    withheld = [d for j in eng.pending(statuses=["done"]) for d in j.decisions if d["op"] == "call"]
    assert sorted(d["withheld"] for d in withheld) == [0, 1]


def test_shared_turns_make_shared_facts(eng: DynamicMemoryEngine, server: ScriptedChatServer) -> None:
    a, b = eng.agent("a"), eng.agent("b")
    a.remember(messages=[{"role": "user", "name": "maya", "content": "I live in Paris"}], shared=True)
    worker(eng, llm(server)).drain()
    (fact,) = [h.memory for h in b.recall("maya lives", types=["info"])]
    assert fact.owner == "" and fact.author == "a"


# -- undoing and erasing ---------------------------------------------------------------------------


def test_revert_undoes_a_correction(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer, clock: FixedClock
) -> None:
    w = worker(eng, llm(server))
    say(me, "I live in Paris")
    w.drain()
    clock.advance(DAY)
    say(me, "I moved to Berlin")
    w.drain()
    job = eng.pending(statuses=["done"])[-1]
    assert eng.revert_extraction(job.job_id) == 1
    assert facts(me) == ["maya lives in Paris"]
    assert eng.revert_extraction(job.job_id) == 0
    assert all(d.get("reverted") for d in eng._backend.jobs.get("default", job.job_id).decisions[1:])  # type: ignore[union-attr]
    with pytest.raises(NotFound):
        eng.revert_extraction("j_nope")


def test_forgetting_a_session_takes_its_facts_and_a_forgotten_turn_is_never_sent(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer
) -> None:
    say(me, "I live in Paris", session="gone")
    worker(eng, llm(server)).drain()
    assert me.forget_where(session="gone").count == 2  # the turn and the fact derived from it
    assert facts(me) == []
    (turn,) = say(me, "I live in Lima", session="later")
    me.forget(turn.id)
    assert worker(eng, llm(server)).drain().done == 1
    assert "Lima" not in str(server.requests) and facts(me) == []


def test_forget_agent_drops_its_queued_jobs(eng: DynamicMemoryEngine, me: Agent) -> None:
    say(me, "I live in Paris")
    eng.agent("other").remember(messages=[{"role": "user", "content": "I live in Rome"}])
    eng.forget_agent("assistant")
    assert [j.agent for j in eng.pending()] == ["other"]
    eng.forget_tenant("default")
    assert eng.pending() == []


def test_a_fact_the_user_forgot_is_not_brought_back(
    eng: DynamicMemoryEngine, me: Agent, server: ScriptedChatServer
) -> None:
    say(me, "I live in Paris")
    w = worker(eng, llm(server))
    w.drain()
    (fact,) = me.memories(types=["info"])
    me.forget(fact.id)
    (again,) = say(me, "I live in Paris", session="again")
    assert w.drain().done == 1
    (job,) = [j for j in eng.pending(statuses=["done"]) if j.memory_ids == (again.id,)]
    assert facts(me) == [] and job.decisions[1]["op"] == "refused"


# -- the shipped reconciler and reasoner -----------------------------------------------------------


def test_the_shipped_reconciler_supersedes_through_reflection(me: Agent, clock: FixedClock) -> None:
    old = me.remember("maya lives in Paris", type="info")
    clock.advance(DAY)
    new = me.remember("maya lives in Berlin", type="info")
    me.link(old.id, new.id, "contradicts")
    answer = {"superseded": [{"old": "m1", "new": "m2"}]}
    with ScriptedChatServer(lambda body: Answer(content=answer)) as server:
        rec = LLMReconciler(ChatClient(server.url, "scripted"))
        report = me.reflect(steps=["reconcile"], reconciler=rec)
    assert report.step("reconcile").changed == 1
    assert me.get(old.id).valid_to is not None and me.get(new.id).valid_to is None
    assert "maya lives in Paris" in server.requests[0]["messages"][1]["content"]


def test_the_shipped_reconciler_naming_an_unknown_alias_changes_nothing(me: Agent, clock: FixedClock) -> None:
    old = me.remember("maya lives in Paris", type="info")
    clock.advance(DAY)
    new = me.remember("maya lives in Berlin", type="info")
    me.link(old.id, new.id, "contradicts")
    answer = {"superseded": [{"old": "m1", "new": "m9"}]}
    with ScriptedChatServer(lambda body: Answer(content=answer)) as server:
        report = me.reflect(steps=["reconcile"], reconciler=LLMReconciler(ChatClient(server.url, "scripted")))
    assert report.step("reconcile").errors == 1 and me.get(old.id).valid_to is None


def test_the_shipped_reasoner_writes_a_gist_of_the_episodes(me: Agent, clock: FixedClock) -> None:
    for i in range(4):
        me.remember(f"maya planned leg {i} of the trip", type="episode")
        clock.advance(60)
    with ScriptedChatServer(lambda body: Answer(content={"gist": "maya planned a four-leg trip"})) as server:
        report = me.reflect(steps=["abstract"], reasoner=LLMReasoner(ChatClient(server.url, "scripted")))
    assert report.step("abstract").changed == 1
    (gist,) = me.memories(types=["reflection"])
    assert gist.content == "maya planned a four-leg trip"
