"""The background: a daemon thread that drains the queue on a connection of its own."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from .errors import LLMError
from .llm import ModelHealth
from .worker import Worker

__all__ = ["Background"]

log = logging.getLogger("memsif_lite")


class Background:
    """A daemon thread that drains the queue on a connection of its own while the application
    runs, so ``add`` never waits on a model. ``close`` asks it to stop and waits briefly: a step
    whose LLM call is still in flight is applied (or redone by the next run) when the reply
    comes — safe either way, since a step is applied at most once. It survives outages: while the model is down (see
    :class:`~memsif_lite.llm.ModelHealth`) it waits instead of falling back, and a busy file or
    an unexpected error only pauses it. A configuration error (:class:`LLMError`) stops it and
    is raised by the next ``add``/``process``/``close``."""

    def __init__(self, open_worker: Callable[[], tuple[Worker, Callable[[], None]]], *,
                 health: ModelHealth | None, idle_s: float = 1.0):
        self._open_worker = open_worker
        self._health = health
        self._idle_s = idle_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="memsif-worker", daemon=True)
        self.error: BaseException | None = None
        self.steps = 0

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def take_error(self) -> BaseException | None:
        err, self.error = self.error, None
        return err

    def _main(self) -> None:
        try:
            worker, close = self._open_worker()
        except BaseException as e:  # noqa: BLE001 - reported to the application, never lost
            self.error = e
            return
        pause = self._idle_s
        try:
            while not self._stop.is_set():
                if self._health is not None and not self._health.available():
                    self._stop.wait(min(self._health.seconds_left(), 5.0))
                    continue
                try:
                    report = worker.run(max_seconds=5.0, stop=self._stop.is_set)
                    self.steps += report.steps
                    pause = self._idle_s
                    if report.pending and report.steps:
                        continue
                except LLMError as e:
                    log.error("background processing stopped: %s", e)
                    self.error = e
                    return
                except Exception:  # noqa: BLE001 - busy file, a bug in a judge...: pause, retry later
                    log.exception("background processing failed; retrying in %.0f s", pause)
                    pause = min(pause * 2, 60.0)
                self._wake.wait(pause)
                self._wake.clear()
        finally:
            close()
