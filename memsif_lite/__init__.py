"""memsif_lite: long-term memory for LLM agents in one SQLite file (the MemSIF design).

``import memsif_lite`` is light: onnxruntime and litellm are imported only when first needed.
"""

from __future__ import annotations

from .version import __version__  # noqa: E402
from .config import Config, FactType  # noqa: E402
from .errors import (  # noqa: E402
    ConfigError,
    EmbeddingError,
    EmbeddingMismatchError,
    EncryptedFileError,
    InvalidInputError,
    LLMError,
    MemoryFileError,
    MemsifError,
    NotAMemoryFileError,
    NotEncryptedError,
    NotFoundError,
    ReadOnlyError,
    SchemaVersionError,
    StorageBusyError,
    StorageCorruptError,
    StorageError,
    StorageFullError,
)
from .active_facts import Evidence  # noqa: E402
from .embed import Embedder, LiteLLMEmbedder, OnnxEmbedder, register_embedder  # noqa: E402
from .memory import Memory  # noqa: E402
from .homes import memory_path, open_memory  # noqa: E402
from .merging import MergeReport  # noqa: E402
from .view import ViewPage  # noqa: E402
from .encryption import decrypt, encrypt, rekey  # noqa: E402
from .query import Answer, Context, EvidenceItem, FactItem  # noqa: E402
from .types import (  # noqa: E402
    ActiveFact,
    CandidateCluster,
    CompactReport,
    CoreFact,
    FactEvent,
    Message,
    SearchResult,
    Segment,
    SessionItem,
    Trajectory,
)

__all__ = [
    "Memory",
    "open_memory",
    "encrypt",
    "decrypt",
    "rekey",
    "MergeReport",
    "CompactReport",
    "ViewPage",
    "memory_path",
    "Config",
    "FactType",
    "Message",
    "SearchResult",
    "Segment",
    "SessionItem",
    "Trajectory",
    "CoreFact",
    "FactEvent",
    "ActiveFact",
    "CandidateCluster",
    "Answer",
    "Context",
    "EvidenceItem",
    "FactItem",
    "Evidence",
    "Embedder",
    "OnnxEmbedder",
    "LiteLLMEmbedder",
    "register_embedder",
    "MemsifError",
    "MemoryFileError",
    "NotAMemoryFileError",
    "SchemaVersionError",
    "EmbeddingMismatchError",
    "EncryptedFileError",
    "NotEncryptedError",
    "InvalidInputError",
    "ConfigError",
    "ReadOnlyError",
    "NotFoundError",
    "EmbeddingError",
    "LLMError",
    "StorageError",
    "StorageBusyError",
    "StorageFullError",
    "StorageCorruptError",
    "__version__",
]
