"""The command line's one error boundary: every error a command lets through becomes ``Error: ...``
on stderr and exit 1 (never a traceback); click's usage errors keep exit 2; an argument that is not
UTF-8 is refused by name. Also the ``memsif`` group itself and how its commands are declared."""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import sys
from collections.abc import Iterator
from typing import Any

import click

from memsif_lite.errors import MemsifError

from .output import printable

__all__ = ["Command", "Group", "command", "error_message", "main", "nothing_added"]

log = logging.getLogger("memsif_lite")


def _os_error(e: OSError) -> str:
    if e.filename is not None:
        return f"{e.filename}: {e.strerror or e}"
    return str(e) or type(e).__name__


def error_message(e: Exception) -> str:
    """What ``Error: ...`` says for an exception a command let through (never a traceback)."""
    if isinstance(e, click.ClickException):
        return e.format_message()
    if isinstance(e, MemsifError):
        return str(e) or type(e).__name__
    if isinstance(e, OSError):
        return _os_error(e)
    if isinstance(e, UnicodeDecodeError):
        return f"the input is not UTF-8 text ({e.reason} at byte {e.start})"
    if isinstance(e, ValueError):
        return str(e) or type(e).__name__
    log.debug("unexpected error in the memsif command line", exc_info=True)
    return f"unexpected {type(e).__name__}: {e} (please report)"


def _not_utf8(value: str) -> str | None:
    """Where an argument is not UTF-8: Python hands undecodable bytes over as lone surrogates."""
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as e:
        return f"a lone surrogate U+{ord(value[e.start]):04X} at character {e.start}"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"byte 0x{raw[e.start]:02x} at offset {e.start}"
    return None


class Command(click.Command):
    """Refuses an argument or option that is not valid UTF-8, naming it and the first bad byte
    (instead of a misleading error from deep inside)."""

    def invoke(self, ctx: click.Context) -> Any:
        for param in self.params:
            value = ctx.params.get(param.name or "")
            for v in value if isinstance(value, (tuple, list)) else (value,):
                where = _not_utf8(v) if isinstance(v, str) else None
                if where:
                    raise click.BadParameter(f"not valid UTF-8 ({where})", ctx=ctx, param=param)
        return super().invoke(ctx)


class Group(click.Group):
    """Turns every error into ``Error: ...`` and exit 1; click's usage errors keep exit 2."""

    command_class = Command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as e:  # an error names what a file or a message holds:
            e.message = printable(e.message)  # type: ignore[misc]  # shown, never sent to the terminal
            raise
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except OSError as e:
            if e.errno == errno.EPIPE:  # click's main() handles a closed pipe quietly
                raise
            raise click.ClickException(printable(error_message(e))) from e
        except Exception as e:
            raise click.ClickException(printable(error_message(e))) from e


#: How every command is declared (then added to :data:`main`).
command = functools.partial(click.command, cls=Command)


@contextlib.contextmanager
def nothing_added() -> Iterator[None]:
    """Every failure of ``add`` and ``ingest`` says the same: they add all of their input or nothing."""
    try:
        yield
    except (click.UsageError, click.exceptions.Exit, click.exceptions.Abort):
        raise
    except Exception as e:
        raise click.ClickException(f"{error_message(e)} (nothing was added)") from e


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memsif_lite")
@click.option("-v", "--verbose", is_flag=True, help="Log debug details (and tracebacks) to stderr.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """memsif: long-term memory for LLM agents in one SQLite file."""
    if verbose:  # only memsif_lite's own records, not every library's; undone when the command ends
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        previous = log.level
        log.addHandler(handler)
        log.setLevel(logging.DEBUG)

        def undo() -> None:
            log.removeHandler(handler)
            log.setLevel(previous)

        ctx.call_on_close(undo)
