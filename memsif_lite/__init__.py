"""memsif_lite: long-term memory for LLM agents in one SQLite file (the MemSIF design).

``import memsif_lite`` is light: onnxruntime and litellm are imported only when first needed.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .config import Config, FactType  # noqa: E402
from .errors import (  # noqa: E402
    ConfigError,
    EmbeddingError,
    EmbeddingMismatchError,
    InvalidInputError,
    LLMError,
    MemoryFileError,
    MemsifError,
    NotAMemoryFileError,
    NotFoundError,
    SchemaVersionError,
)
from .memory import Memory  # noqa: E402
from .types import Message, SearchResult, Segment, Trajectory  # noqa: E402

__all__ = [
    "Memory",
    "Config",
    "FactType",
    "Message",
    "SearchResult",
    "Segment",
    "Trajectory",
    "MemsifError",
    "MemoryFileError",
    "NotAMemoryFileError",
    "SchemaVersionError",
    "EmbeddingMismatchError",
    "InvalidInputError",
    "ConfigError",
    "NotFoundError",
    "EmbeddingError",
    "LLMError",
    "__version__",
]
