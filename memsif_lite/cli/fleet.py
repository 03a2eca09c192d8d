"""``memsif fleet``: work over every memory file of a memory home on a Dask cluster
(:mod:`memsif_lite.fleet`; the ``fleet`` extra)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import click

from .boundary import Group
from .options import config_option, llm_options
from .output import output, plural

__all__ = ["fleet"]


@click.group("fleet", cls=Group)
def fleet() -> None:
    """Work over every memory file of a memory home on a Dask cluster (needs the fleet extra:
    pip install 'memsif_lite[fleet]')."""


def _process_lines(doc: Mapping[str, Any], **_: Any) -> list[str]:
    lines = [f"{plural(doc['done'], 'file')} done, {doc['failed']} failed: {plural(doc['steps'], 'step')} in "
             f"{doc['seconds']:.1f}s on {plural(doc['workers'], 'worker')}"]
    lines += [f"  FAILED {f['path']}: {f['error']}" for f in doc["files"] if not f["ok"]]
    return lines


@fleet.command("process")
@click.option("--home", envvar="MEMSIF_HOME", required=True, type=click.Path(file_okay=False, exists=True),
              help="The memory home whose files to process (also MEMSIF_HOME): users/*.db, users/*/*.db, agents/*.db.")
@click.option("--scheduler", default=None, metavar="ADDR",
              help="Address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (its workers must see --home "
                   "at the same path).")
@click.option("--local", "local", type=click.IntRange(min=1), default=None, metavar="N",
              help="Start N local worker processes (one thread each) instead.")
@config_option
@llm_options
@click.option("--llm-from-workers", is_flag=True,
              help="Each worker uses its own MEMSIF_LLM / MEMSIF_API_BASE / MEMSIF_API_KEY (e.g. an LLM server on "
                   "each machine) instead of --llm & co.")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
              help="Run a file's task again this many times after it fails, then report it failed.")
@output(_process_lines, failed=lambda doc: doc["failed"] > 0)
def process(home: str, scheduler: str | None, local: int | None, config: str | None, llm: str | None,
            api_base: str | None, api_key: str | None, llm_from_workers: bool, retries: int) -> dict[str, Any]:
    """Drain the work queue of every memory file under --home (as `memsif process` does for one
    file), one file per task on a Dask cluster, with retries and a progress bar on stderr. Every
    file is reported, done or failed with its error; exit 1 if any failed."""
    if (scheduler is None) == (local is None):
        raise click.UsageError("give one of --scheduler ADDR or --local N")
    if llm_from_workers and (llm or api_base or api_key):
        raise click.UsageError("--llm-from-workers and --llm/--api-base/--api-key contradict each other")
    from memsif_lite import Config
    from memsif_lite.fleet import process_fleet  # dask is imported only by this command

    cfg = Config.from_file(config) if config else None
    llm_kwargs = {k: v for k, v in (("api_base", api_base), ("api_key", api_key)) if v}
    with click.progressbar(length=1, label="files", file=sys.stderr, show_pos=True) as bar:
        def advance(result: Any, done: int, total: int) -> None:
            bar.length = total
            bar.update(1)

        report = process_fleet(home, scheduler if scheduler is not None else local, llm=llm or None,
                               llm_kwargs=llm_kwargs, worker_env=llm_from_workers, config=cfg, retries=retries,
                               progress=advance)
    failed = len(report.failed)
    return {"files": list(report.files), "done": len(report.files) - failed, "failed": failed,
            "steps": report.steps, "seconds": report.seconds, "workers": report.workers}
