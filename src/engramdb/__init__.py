"""engramdb: a memory engine for LLM agents and multi-agent teams.

The public API is exactly what ``__all__`` lists; every other module is an implementation detail.
"""

from engramdb.agent import Agent, AsyncAgent, MemoryVersion
from engramdb.config import TeamMemoryConfig, load_config
from engramdb.embeddings.base import Embedder, Reranker
from engramdb.engine import DynamicMemoryEngine, open_team_memory_engine
from engramdb.errors import (
    BackendError,
    CallerError,
    ConfigError,
    ConstraintError,
    EmbedderError,
    EngineFailure,
    EngramError,
    ForbiddenDDLError,
    Forgotten,
    InvalidAgentId,
    InvalidStatement,
    LLMError,
    MissingExtra,
    NotFound,
    RerankerError,
    ResourceLimitExceeded,
    SchemaVersionError,
    ScopeViolation,
    SqlError,
    TransactionError,
    ValidationError,
)
from engramdb.memories.forgetting import ForgettingPolicy, prune_time, retention
from engramdb.memories.model import (
    AccessRecord,
    Channel,
    Components,
    Confidentiality,
    Edge,
    EdgeType,
    Limits,
    Memory,
    MemoryPage,
    MemoryRef,
    MemoryType,
    TodoStatus,
    Tombstone,
)
from engramdb.memories.prospective import Injection, Trigger
from engramdb.memories.references import FileResolver, ReferenceResolvers, Resolver
from engramdb.memories.reflection import Reasoner, Reconciler, ReflectionConfig, ReflectionReport
from engramdb.memories.scoring import ScoringConfig
from engramdb.observability.stats import Stats
from engramdb.retrieval.budget import TokenCounter, approx_tokens
from engramdb.retrieval.evidence import EvidenceItem, render_evidence
from engramdb.retrieval.results import Explained, Explanation, Hit, Recall
from engramdb.retrieval.retriever import MemoryRetriever, RetrievedRow
from engramdb.retrieval.when import TimeWindow
from engramdb.storage.ports import ExecResult, MemoryScope
from engramdb.tenancy.contract import (
    ALL_NAMESPACES,
    AsyncMemoryStore,
    MemoryEntry,
    MemoryQuery,
    MemoryStore,
    TenantScope,
)
from engramdb.tenancy.namespaced import NamespacedMemory, TenantFiles
from engramdb.tools import (
    LIST_MEMORY_TABLES_TOOL,
    MEMORY_SCHEMA_TOOL,
    RECALL_TOOL,
    REMEMBER_TOOL,
    MemoryToolbox,
    ToolLimits,
    ToolSpec,
    list_memory_tables,
    memory_schema,
    tool_specs,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "ALL_NAMESPACES",
    "LIST_MEMORY_TABLES_TOOL",
    "MEMORY_SCHEMA_TOOL",
    "RECALL_TOOL",
    "REMEMBER_TOOL",
    "AccessRecord",
    "Agent",
    "AsyncAgent",
    "AsyncMemoryStore",
    "BackendError",
    "CallerError",
    "Channel",
    "Components",
    "Confidentiality",
    "ConfigError",
    "ConstraintError",
    "DynamicMemoryEngine",
    "Edge",
    "EdgeType",
    "Embedder",
    "EmbedderError",
    "EngineFailure",
    "EngramError",
    "EvidenceItem",
    "ExecResult",
    "Explained",
    "Explanation",
    "FileResolver",
    "ForbiddenDDLError",
    "ForgettingPolicy",
    "Forgotten",
    "Hit",
    "Injection",
    "InvalidAgentId",
    "InvalidStatement",
    "LLMError",
    "Limits",
    "Memory",
    "MemoryEntry",
    "MemoryPage",
    "MemoryQuery",
    "MemoryRef",
    "MemoryRetriever",
    "MemoryScope",
    "MemoryStore",
    "MemoryToolbox",
    "MemoryType",
    "MemoryVersion",
    "MissingExtra",
    "NamespacedMemory",
    "NotFound",
    "Reasoner",
    "Recall",
    "Reconciler",
    "ReferenceResolvers",
    "ReflectionConfig",
    "ReflectionReport",
    "Reranker",
    "RerankerError",
    "Resolver",
    "ResourceLimitExceeded",
    "RetrievedRow",
    "SchemaVersionError",
    "ScopeViolation",
    "ScoringConfig",
    "SqlError",
    "Stats",
    "TeamMemoryConfig",
    "TenantFiles",
    "TenantScope",
    "TimeWindow",
    "TodoStatus",
    "TokenCounter",
    "Tombstone",
    "ToolLimits",
    "ToolSpec",
    "TransactionError",
    "Trigger",
    "ValidationError",
    "__version__",
    "approx_tokens",
    "list_memory_tables",
    "load_config",
    "memory_schema",
    "open_team_memory_engine",
    "prune_time",
    "render_evidence",
    "retention",
    "tool_specs",
]
