"""The mode: when queued steps run, the user's choice (``Memory(process=...)``)."""

from __future__ import annotations

from .background import Background
from .worker import ProcessReport, Worker

__all__ = ["Mode"]


class Mode:
    """When queued steps run:

    * ``"inline"`` — inside ``add``: offline in its own transaction (the default without an
      LLM); with an LLM after the commit, with no transaction open (``add`` waits, the file's
      write lock does not);
    * ``"background"`` — a daemon thread with its own connection (the default with an LLM);
    * ``"manual"`` — only when :meth:`run` (``Memory.process``, ``memsif process``) is called.
    """

    MODES = ("inline", "background", "manual")

    def __init__(self, mode: str, worker: Worker, *, offline: bool, background: Background | None):
        self.mode, self.worker, self.offline, self.background = mode, worker, offline, background
        if background is not None:
            background.start()

    @property
    def in_add(self) -> bool:
        """Run the steps inside ``add``'s own transaction."""
        return self.mode == "inline" and self.offline

    def after_add(self) -> None:
        self._raise_background_error()
        if self.mode == "inline" and not self.offline:
            self.worker.run()
        elif self.mode == "inline":
            self.worker.refresh_partition()
        elif self.background is not None:
            self.background.wake()

    def run(self, max_steps: int | None, max_seconds: float | None) -> ProcessReport:
        self._raise_background_error()
        return self.worker.run(max_steps=max_steps, max_seconds=max_seconds, thorough=True)

    def close(self, timeout: float) -> None:
        if self.background is not None:
            self.background.stop(timeout)
            self._raise_background_error()

    def _raise_background_error(self) -> None:
        if self.background is not None and (err := self.background.take_error()) is not None:
            raise err
