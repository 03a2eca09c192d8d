"""Where the command line gets encryption keys: an environment variable holding the key
(``MEMSIF_KEY``), a file holding it (``--key-file``), a command printing it (``--key-command``:
an OS keychain, a password manager), or, on a terminal, a prompt. Never a command-line argument
(every user of the machine can read those), and never printed, logged or written.

The other keys follow the same pattern: the new key of ``rekey`` (``MEMSIF_NEW_KEY``,
``--new-key-file``, ``--new-key-command``) and the key of the file ``merge`` reads
(``MEMSIF_OTHER_KEY``, ``--other-key-file``, ``--other-key-command``)."""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from memsif_lite.errors import InvalidInputError
from memsif_lite.keys import Key, as_key

__all__ = ["KeySource", "KEY", "NEW_KEY", "OTHER_KEY", "key_options", "given_key", "asked_key"]

F = TypeVar("F", bound=Callable[..., Any])

#: how long a key command may take (a password manager may wait for its own prompt)
COMMAND_TIMEOUT_S = 120


@dataclass(frozen=True)
class KeySource:
    """One key a command may need, and the ways to give it."""

    param: str  # the options' Python names: PARAM_file, PARAM_command
    what: str  # how messages name it
    env: str  # the variable holding the key itself; ENV_FILE and ENV_COMMAND hold the options' values

    @property
    def flag(self) -> str:
        return "--" + self.param.replace("_", "-")

    def hint(self) -> str:
        return f"set {self.env}, or use {self.flag}-file or {self.flag}-command"


KEY = KeySource("key", "key", "MEMSIF_KEY")
NEW_KEY = KeySource("new_key", "new key", "MEMSIF_NEW_KEY")
OTHER_KEY = KeySource("other_key", "other file's key", "MEMSIF_OTHER_KEY")


def key_options(source: KeySource, about: str = "the memory file") -> Callable[[F], F]:
    """``--PARAM-file`` and ``--PARAM-command`` (also ``ENV_FILE`` / ``ENV_COMMAND``); the command
    does not receive them: it asks :func:`given_key` for the key when it needs it."""

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = (kwargs.pop(f"{source.param}_file"), kwargs.pop(f"{source.param}_command"))
            click.get_current_context().meta[f"memsif.{source.param}"] = given
            return f(*args, **kwargs)

        opts = [
            click.option(f"{source.flag}-file", f"{source.param}_file", envvar=f"{source.env}_FILE", default=None,
                         type=click.Path(dir_okay=False), metavar="FILE",
                         help=f"Read the encryption key of {about} from FILE (one line; also {source.env}_FILE). "
                              f"Or set {source.env} to the key itself."),
            click.option(f"{source.flag}-command", f"{source.param}_command", envvar=f"{source.env}_COMMAND",
                         default=None, metavar="COMMAND",
                         help=f"Run COMMAND (no shell) and use what it prints as the key of {about}: a keychain or "
                              f"password manager (also {source.env}_COMMAND)."),
        ]
        out: Callable[..., Any] = wrapper
        for opt in reversed(opts):
            out = opt(out)
        return cast(F, out)

    return decorate


def given_key(source: KeySource) -> Key | None:
    """The key given for ``source`` in any one of its ways, or None; read once per command (a key
    command runs once) and wiped when the command ends."""
    ctx = click.get_current_context()
    keys: dict[str, Key | None] = ctx.meta.setdefault("memsif.keys", {})
    if source.param not in keys:
        file, command = ctx.meta.get(f"memsif.{source.param}", (None, None))
        key = _read(source, file, command)
        if key is not None:
            ctx.call_on_close(key.wipe)
        keys[source.param] = key
    return keys[source.param]


def asked_key(source: KeySource, of: str, *, confirm: bool = False) -> Key | None:
    """The key typed at a prompt (not shown; on stderr), if stdin is a terminal; else None."""
    if sys.stdin is None or not sys.stdin.isatty():
        return None
    typed = click.prompt(f"{source.what.capitalize()} of {of}", hide_input=True, confirmation_prompt=confirm,
                         err=True)
    key = as_key(typed, source.what)
    ctx = click.get_current_context()
    if key is not None:
        ctx.call_on_close(key.wipe)
    ctx.meta.setdefault("memsif.keys", {})[source.param] = key  # asked once (view --serve opens again)
    return key


def _read(source: KeySource, file: str | None, command: str | None) -> Key | None:
    # taken out of the environment once read: the programs memsif starts (a key command, a browser)
    # do not inherit the key
    value = os.environ.pop(source.env, None)
    ways = [w for w, v in ((source.env, value), (f"{source.flag}-file", file), (f"{source.flag}-command", command))
            if v]
    if len(ways) > 1:
        raise click.UsageError(f"give the {source.what} one way, not {' and '.join(ways)}")
    if value:
        return as_key(value, source.what)
    if file:
        try:
            data = Path(file).read_bytes()
        except OSError as e:
            raise click.ClickException(f"cannot read the {source.what} from {file}: {e.strerror or e}") from None
        return _key(_one_line(data), f"{source.what} in {file}")
    if command:
        return _key(_one_line(_run(command, source.what)), f"{source.what} {source.flag}-command printed")
    return None


def _key(data: bytes, what: str) -> Key | None:
    try:
        return as_key(data, what)
    except InvalidInputError as e:
        raise click.ClickException(str(e)) from None


def _one_line(data: bytes) -> bytes:
    """A key file or a command's output without its one final line break."""
    for end in (b"\r\n", b"\n"):
        if data.endswith(end):
            return data[: -len(end)]
    return data


def _run(command: str, what: str) -> bytes:
    """What ``command`` prints. It reads no stdin (that may be an MCP client's stream) and its
    stderr goes to ours; neither its output nor the command line is ever shown in an error."""
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise click.UsageError(f"the {what} command cannot be split into words: {e}") from None
    if not argv:
        raise click.UsageError(f"the {what} command is empty")
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, check=False,
                              timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise click.ClickException(f"the {what} command did not finish in {COMMAND_TIMEOUT_S} s") from None
    except OSError as e:
        raise click.ClickException(f"cannot run the {what} command {argv[0]!r}: {e.strerror or e}") from None
    if done.returncode != 0:
        raise click.ClickException(f"the {what} command {argv[0]!r} failed (exit status {done.returncode})")
    return done.stdout
