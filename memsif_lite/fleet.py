"""A fleet of memory files on Dask: drain the work queues of every per-user file under a memory
home (:mod:`memsif_lite.homes`) on a ``dask.distributed`` cluster, one file per task.

Needs the ``fleet`` extra (``pip install 'memsif_lite[fleet]'``: dask and distributed); only this
module imports them, and ``import memsif_lite`` never imports this module.

Why per-file tasks: one file per user is already the shard; files share nothing, so a task is
``Memory(path, process="manual").process()`` on one file and needs no state from any other. A
task is safe to run twice (a step is deleted in the transaction that applies it, and a file's
write lock serialises two processes), so a task lost with its worker is simply run again
elsewhere, and a task that raises is retried ``retries`` times. Every file ends in the report,
done or failed with its error: none is lost.

The LLM: each task opens its file with the LLM settings given here (``llm``, ``llm_kwargs``:
sent to the workers with the task, so an ``api_key`` travels to the scheduler and workers) or,
with ``worker_env=True``, with each worker's own ``MEMSIF_LLM`` / ``MEMSIF_API_BASE`` /
``MEMSIF_API_KEY`` (a cluster of machines, each with its own LLM server on 127.0.0.1). A memory
file never chooses a connection: nothing read from a file reaches these settings.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from . import store
from .config import Config
from .embed import Embedder
from .errors import ConfigError, InvalidInputError, MemoryFileError, MemsifError
from .homes import validate_name
from .memory import Memory
from .pipelines import embedder_for

__all__ = ["FileResult", "FleetReport", "FleetTaskError", "home_files", "process_file", "process_fleet"]

log = logging.getLogger("memsif_lite")

#: environment variables a worker reads its LLM settings from with ``worker_env=True``
WORKER_ENV = ("MEMSIF_LLM", "MEMSIF_API_BASE", "MEMSIF_API_KEY")
#: the embedding models a worker process has loaded, by what makes one (loading one takes longer
#: than draining a small file's queue, so a worker loads each model once, not once per file)
_EMBEDDERS: dict[tuple[str, int, str, tuple[float, ...]], Embedder] = {}
#: at most this many kept (the levels come from each file's meta: a home of files that all differ
#: must not grow a worker by one loaded model per file)
EMBEDDERS_KEPT = 4


class FleetTaskError(MemsifError):
    """A file's task failed on a worker; the message names the original error (``Type: message``).
    One string argument, so it travels back from a worker process intact."""


@dataclass(frozen=True)
class FileResult:
    """One file's outcome: ``ok`` with the steps run and still pending (a limit, or a step set
    aside), or not ``ok`` with ``error`` (after the retries)."""

    path: str
    ok: bool
    steps: int = 0
    pending: int = 0
    seconds: float = 0.0
    worker: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class FleetReport:
    """Every file of the home, done or failed, in path order; ``seconds`` of wall time."""

    files: tuple[FileResult, ...]
    seconds: float
    workers: int

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if not f.ok]

    @property
    def steps(self) -> int:
        return sum(f.steps for f in self.files)


def home_files(home: str | Path) -> tuple[list[Path], list[FileResult]]:
    """The memory files under ``home`` laid out as :mod:`memsif_lite.homes` lays them out
    (``users/<u>.db``, ``users/<u>/<a>.db``, ``agents/<a>.db``), sorted; and, as failed results,
    what is there but refused: a symbolic link (file or directory) or a name memsif never makes."""
    root = Path(home).expanduser()
    if not root.is_dir():
        raise InvalidInputError(f"no memory home at {root} (a directory with users/ and agents/)")
    found: list[Path] = []
    refused: list[FileResult] = []

    def visit(directory: Path, depth: int) -> None:
        if not directory.exists():
            return
        if directory.is_symlink():
            refused.append(FileResult(str(directory), False, error="a symbolic link: memory homes hold plain files"))
            return
        for entry in sorted(directory.iterdir()):
            if entry.is_symlink():
                refused.append(FileResult(str(entry), False, error="a symbolic link: memory homes hold plain files"))
            elif entry.is_dir() and depth > 0:
                if _name_ok(entry.name):
                    visit(entry, depth - 1)
            elif entry.is_file() and entry.suffix == ".db":
                if _name_ok(entry.stem):
                    found.append(entry)
                else:
                    refused.append(FileResult(str(entry), False, error="not a name memsif gives a memory file"))

    visit(root / "users", 1)
    visit(root / "agents", 0)
    return sorted(found), refused


def _name_ok(name: str) -> bool:
    try:
        return validate_name(name) == name
    except InvalidInputError:
        return False


def process_file(path: str, llm: str | None = None, llm_kwargs: Mapping[str, Any] | None = None, *,
                 worker_env: bool = False, config: Config | None = None) -> FileResult:
    """The task: drain one file's queue (``memsif process`` on it) and report. Any error is raised
    as :class:`FleetTaskError` (so the cluster retries it and the message survives the trip)."""
    t0 = time.perf_counter()
    if worker_env:
        llm = os.environ.get("MEMSIF_LLM") or None
        llm_kwargs = {k: v for k, v in (("api_base", os.environ.get("MEMSIF_API_BASE")),
                                        ("api_key", os.environ.get("MEMSIF_API_KEY"))) if v}
    try:
        with Memory(path, config=config, llm=llm, llm_kwargs=llm_kwargs or None, process="manual",
                    embedder=_embedder(path, config)) as mem:
            report = mem.process()
    except Exception as e:  # noqa: BLE001 - reported per file, with its type
        raise FleetTaskError(f"{type(e).__name__}: {e}") from None
    return FileResult(path, True, steps=report.steps, pending=report.pending,
                      seconds=round(time.perf_counter() - t0, 3), worker=_worker_name())


def _embedder(path: str, config: Config | None) -> Embedder:
    """The model this file's ``Memory`` would load (the configured one, else the one the file
    records: :func:`~memsif_lite.pipelines.embedder_for`), loaded once per worker process. A file
    that is not there is refused: processing never creates one."""
    info = store.inspect(path)
    if info is None:
        raise MemoryFileError(f"no memory file at {path} (nothing to process)")
    emb = embedder_for(config or Config(), info)
    key = (emb.model_id, emb.dim, emb.metric, tuple(emb.sem_levels))
    if key not in _EMBEDDERS and len(_EMBEDDERS) >= EMBEDDERS_KEPT:  # a file's meta names the key: bounded
        del _EMBEDDERS[next(iter(_EMBEDDERS))]  # the oldest
    return _EMBEDDERS.setdefault(key, emb)


def _worker_name() -> str | None:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):  # run outside a worker (tests, a plain call)
        return None


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as e:
        raise ConfigError("a fleet needs dask.distributed: pip install 'memsif_lite[fleet]'") from e
    return distributed


@contextlib.contextmanager
def _client(cluster: Any) -> Iterator[Any]:
    """A client on ``cluster``: a ``distributed.Client`` (used as it is), a scheduler address
    (``tcp://host:8786``), or a number of local worker processes (one thread each)."""
    distributed = _distributed()
    if isinstance(cluster, distributed.Client):
        yield cluster
    elif isinstance(cluster, str) and cluster.strip():
        with distributed.Client(cluster.strip()) as client:
            yield client
    elif isinstance(cluster, int) and not isinstance(cluster, bool) and cluster >= 1:
        with distributed.LocalCluster(n_workers=cluster, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as local, distributed.Client(local) as client:
            yield client
    else:
        raise InvalidInputError("cluster must be a distributed.Client, a scheduler address or a number of local "
                                f"workers (>= 1), not {cluster!r}")


def process_fleet(home: str | Path, cluster: Any, *, llm: str | None = None,
                  llm_kwargs: Mapping[str, Any] | None = None, worker_env: bool = False,
                  config: Config | None = None, retries: int = 2,
                  progress: Callable[[FileResult, int, int], None] | None = None) -> FleetReport:
    """Drain the work queue of every memory file under ``home`` on ``cluster`` (a
    ``distributed.Client``, a scheduler address, or N local worker processes), one file per task.
    A task that fails is retried ``retries`` times (a worker that dies is replaced and its task
    run again, as the scheduler allows); then the file is reported failed. ``progress(result, done,
    total)`` is called as each file completes (a file refused before any task runs comes first).
    The files must be at the same path on every worker."""
    if llm is not None and worker_env:
        raise InvalidInputError("give the workers an llm, or let them read it from their environment "
                                "(worker_env=True), not both")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise InvalidInputError(f"retries must be a whole number >= 0, not {retries!r}")
    if llm_kwargs is not None and not isinstance(llm_kwargs, Mapping):
        raise InvalidInputError("llm_kwargs must be a mapping of litellm keyword arguments")
    paths, results = home_files(home)
    total = len(paths) + len(results)
    for n, refused in enumerate(results, start=1):
        if progress is not None:
            progress(refused, n, total)
    t0 = time.perf_counter()
    with _client(cluster) as client:
        workers = len(client.scheduler_info().get("workers", {}))
        token = uuid.uuid4().hex[:12]  # the task keys of this run (a client may run several)
        futures = {client.submit(process_file, str(p), llm, dict(llm_kwargs or {}), worker_env=worker_env,
                                 config=config, retries=retries, pure=False, key=f"memsif-process-{token}-{i}"): str(p)
                   for i, p in enumerate(paths)}
        for fut in _distributed().as_completed(list(futures)):
            result = _outcome(fut, futures[fut])
            results.append(result)
            if progress is not None:
                progress(result, len(results), total)
    results.sort(key=lambda r: r.path)
    return FleetReport(tuple(results), round(time.perf_counter() - t0, 3), workers)


def _outcome(fut: Any, path: str) -> FileResult:
    if fut.status == "finished":
        return fut.result()
    try:
        exc = fut.exception()
    except BaseException as e:  # noqa: BLE001 - a cancelled future raises here
        exc = e
    text = str(exc) if isinstance(exc, FleetTaskError) else f"{type(exc).__name__}: {exc}"
    log.warning("fleet: %s failed: %s", path, text)
    return FileResult(path, False, error=text)
