"""The optional LLM layer: a chat client for OpenAI-compatible endpoints, the extractor that
turns queued conversations into facts, and the reconciler and reasoner reflection uses.

Nothing here runs unless asked for; the standard library is all it needs (no extra).

Example::

    from engramdb import DynamicMemoryEngine
    from engramdb.llm import ChatClient, LLMExtractor

    llm = ChatClient("http://localhost:11434/v1", "qwen2.5:3b")
    engine = DynamicMemoryEngine("team.db", extractor=LLMExtractor(llm))
    me = engine.agent("assistant")
    me.remember(messages=[{"role": "user", "content": "I moved to Berlin"}], session="chat-7")
    engine.pending()            # queued, running or failed extraction jobs
"""

from engramdb.llm.client import ChatClient
from engramdb.llm.protocol import Decision, Extractor, RejectedAnswer, check_decisions
from engramdb.llm.shipped import LLMExtractor, LLMReasoner, LLMReconciler
from engramdb.llm.worker import ExtractionWorker, WorkReport, revert

__all__ = [
    "ChatClient",
    "Decision",
    "ExtractionWorker",
    "Extractor",
    "LLMExtractor",
    "LLMReasoner",
    "LLMReconciler",
    "RejectedAnswer",
    "WorkReport",
    "check_decisions",
    "revert",
]
