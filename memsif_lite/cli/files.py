"""The commands about whole files: merge another copy in, export, import, backup, check, compact,
and encrypt, decrypt or re-key one in place."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from memsif_lite import Config, encryption
from memsif_lite.compat import mem0 as compat_mem0
from memsif_lite.errors import EncryptedFileError, MemoryFileError, MemsifError
from memsif_lite.homes import make_private_dirs
from memsif_lite.keys import Key

from .boundary import command
from .keys import KEY, NEW_KEY, OTHER_KEY, KeySource, asked_key, given_key, key_options
from .options import config_option, file_options, key_file_options, open_memory, writable_parent
from .output import fields_of, output, plural, stats_line

__all__ = ["backup", "check", "compact", "decrypt", "encrypt", "export", "import_", "import_mem0", "merge", "rekey"]


def _merge_lines(doc: Mapping[str, Any], *, other: str, dry_run: bool, **_: Any) -> Iterator[str]:
    yield (f"{'would add' if dry_run else 'added'} {plural(doc['added'], 'message')} from {other} "
           f"({doc['skipped_present']} already here, {doc['skipped_forgotten']} forgotten on one side); "
           f"{'would remove' if dry_run else 'removed'} {doc['removed_by_tombstones']} forgotten there"
           + (f"; {doc['re_embedded']} re-embedded with this file's model" if doc["re_embedded"] else ""))
    if doc["rebuilt_from"]:
        yield (f"structure {'to rebuild' if dry_run else 'rebuilt'} from {doc['rebuilt_from']}"
               + (f" ({plural(doc['replayed'], 'message')} placed again)" if doc["replayed"] else ""))
    if doc["changes_copied"]:
        yield f"{plural(doc['changes_copied'], 'change')} of its log {'to copy' if dry_run else 'copied'} (memsif log)"
    yield from (f"  + fact {line}" for line in doc["facts_added"])
    yield from (f"  ~ superseded {line}" for line in doc["facts_superseded"])
    yield from (f"  - fact {line}" for line in doc["facts_removed"])
    if doc["pending_steps"]:
        yield f"{plural(doc['pending_steps'], 'step')} pending (run `memsif process --db {doc['db']}`)"
    yield stats_line(doc["stats"])


@command()
@click.argument("other", type=click.Path(dir_okay=False))
@file_options
@click.option("--dry-run", is_flag=True, help="Report what the merge would do, writing nothing.")
@click.option("--later", is_flag=True,
              help="Only queue the structure rebuild (run it with `memsif process`, e.g. with --llm).")
@key_options(OTHER_KEY, "OTHER")
@output(_merge_lines)
def merge(other: str, db: str, config: str | None, dry_run: bool, later: bool) -> dict[str, Any]:
    """Bring into --db what OTHER (another copy of the same memory) has: new messages (re-embedded
    if OTHER used another model), forgotten ones removed, structure and facts rebuilt. OTHER is
    only read; if it is encrypted, its key is asked for (or MEMSIF_OTHER_KEY & co), and never stored."""
    if not Path(other).exists():
        raise click.ClickException(f"no memory file at {other}")
    with open_memory(db, config, later=later, read_only=dry_run) as mem:
        try:
            report = mem.merge_from(other, dry_run=dry_run, key=given_key(OTHER_KEY))
        except EncryptedFileError as e:
            asked = None if e.key_given else asked_key(OTHER_KEY, other)
            if asked is None:
                raise click.ClickException(str(e) if e.key_given else f"{e} ({OTHER_KEY.hint()})") from None
            report = mem.merge_from(other, dry_run=dry_run, key=asked)
        return {**report.to_dict(), "db": db, "stats": mem.stats()}


@command("export")
@file_options
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="JSON-lines file to write (a new one).")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@output(lambda doc, **_: [f"wrote {plural(doc['lines'], 'line')} to {doc['out']}"])
def export(db: str, config: str | None, out: str, force: bool) -> dict[str, Any]:
    """Export everything to JSON lines (import it with `memsif import`), readable by its owner only;
    plain text, also from an encrypted file (to copy one encrypted, use `memsif backup`)."""
    writable_parent(out)
    with open_memory(db, config, read_only=True) as mem:
        return {"db": db, "out": out, "lines": mem.export_to(out, overwrite=force)}


@command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@file_options
@output(lambda doc, **_: [f"imported {plural(doc['imported'].get('messages', 0), 'message')}; "
                          f"{stats_line(doc['stats'])}"])
def import_(file: str, db: str, config: str | None) -> dict[str, Any]:
    """Load an export (from `memsif export`) into a fresh memory file, creating it if needed."""
    try:
        with _built_aside(db) as path, open_memory(path, config, create=True) as mem:
            counts = mem.import_from(file)
            st = mem.stats()
    except UnicodeDecodeError as e:
        raise click.ClickException(f"cannot read {file}: not UTF-8 text ({e.reason} at byte {e.start}); "
                                   "expected an export written by `memsif export`") from None
    return {"file": file, "db": db, "imported": counts, "stats": st}


@command("import-mem0")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--home", envvar="MEMSIF_HOME", default=None, type=click.Path(file_okay=False),
              help="Directory of per-user/agent memory files (also MEMSIF_HOME; default: the user data directory, "
                   "e.g. ~/.local/share/memsif).")
@config_option
@output(lambda doc, **_: [f"imported {plural(doc['memories'], 'memory', 'memories')} from {doc['file']}: "
                          f"{doc['new']} new, {doc['already_present']} already there"]
        + [f"  {path}: {plural(n, 'memory', 'memories')}" for path, n in doc["files"].items()])
def import_mem0(file: str, home: str | None, config: str | None) -> dict[str, Any]:
    """Load mem0's JSON export (what its get_all() returns: {"results": [...]} or a list of memories,
    each with memory, user_id / agent_id / run_id, metadata, created_at) into one memory file per
    user / agent under --home, as `memsif_lite.compat.mem0.Memory` keeps them. The whole export is
    checked before anything is written; running it again stores nothing twice."""
    cfg = Config.from_file(config) if config else None
    return compat_mem0.import_mem0(file, home=home, config=cfg)


@contextlib.contextmanager
def _built_aside(db: str) -> Iterator[str]:
    """Where to build ``db``: itself if it exists; else a new file of a random name beside it,
    linked into place once the block succeeded. So a failed import leaves no file behind, and
    nothing this command did not create is ever removed (not a file another process made there
    meanwhile: then the import fails and that file stays as it is)."""
    if Path(db).exists():
        yield db
        return
    if click.get_current_context().meta.get("memsif.home_file"):
        make_private_dirs(Path(db).parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{Path(db).name}.", suffix=".new", dir=Path(db).parent)
    os.close(fd)  # an empty file, which Memory makes a memory file
    try:
        yield tmp
        try:
            os.link(tmp, db)
        except OSError:
            if os.path.lexists(db):
                raise MemoryFileError(f"{db} appeared while importing; it was left as it is") from None
            os.replace(tmp, db)  # a file system without hard links
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(tmp + suffix).unlink(missing_ok=True)


@command()
@click.argument("dest", type=click.Path(dir_okay=False))
@file_options
@output(lambda doc, **_: [f"backed up to {doc['dest']}"])
def backup(dest: str, db: str, config: str | None) -> dict[str, Any]:
    """Write a consistent copy of the memory file to DEST (safe while others write); a copy of an
    encrypted file is encrypted with the same key (`memsif decrypt` or `rekey` it to change that)."""
    writable_parent(dest)
    with open_memory(db, config, read_only=True) as mem:
        mem.backup(dest)
    return {"db": db, "dest": dest, "bytes": Path(dest).stat().st_size}


#: a -wal larger than this after a compaction is named (it is cut back to a frame or two when it can be)
COMPACT_WAL_NOTE = 1 << 20


def _compact_lines(doc: Mapping[str, Any], **_: Any) -> Iterator[str]:
    yield (f"compacted {doc['db']}: {doc['bytes_before'] / 1e6:,.1f} MB -> {doc['bytes_after'] / 1e6:,.1f} MB "
           f"in {doc['seconds']:.1f} s")
    if doc["wal_bytes"] > COMPACT_WAL_NOTE:
        yield (f"its -wal still holds {doc['wal_bytes'] / 1e6:,.0f} MB (another connection was reading or writing); "
               "SQLite removes it when the last one closes the file")


@command()
@file_options
@output(_compact_lines)
def compact(db: str, config: str | None) -> dict[str, Any]:
    """Rewrite the memory file so that each table's pages lie together (SQLite's VACUUM), and give
    free pages back to the disk: on a large file the first search after a reboot reads far less
    (at a million messages 465 MB of the disk instead of 1,245). Nothing in the memory changes; a
    crash or an error leaves the file as it was. Needs free disk about twice the file; 6-13 s a GB
    on a 2-core machine, while other programs may read (writers wait)."""
    _exists(db)
    with open_memory(db, config, later=True) as mem:  # queued steps wait for `memsif process`
        click.echo(f"compacting {db} ({Path(db).stat().st_size / 1e6:,.1f} MB)...", err=True)
        report = mem.compact()
    return {"db": db, **fields_of(report)}


def _check_lines(doc: Mapping[str, Any], **_: Any) -> Iterator[str]:
    if doc["problems"]:
        yield "NOT OK:"
        yield from (f"  - {p}" for p in doc["problems"])
    else:
        st = doc["stats"]
        yield (f"OK: a memsif memory file (schema, integrity, full-text index and vectors check out); "
               f"{plural(st['messages'], 'message')}, {plural(st['segments'], 'segment')}, "
               f"{plural(st['core_facts'], 'fact')}")


@command()
@file_options
@output(_check_lines, failed=lambda doc: not doc["ok"])
def check(db: str, config: str | None) -> dict[str, Any]:
    """Check a memory file: what it is, integrity, schema, indexes and vectors (exit 1 on problems)."""
    st: dict[str, int] = {}
    if not Path(db).exists():
        problems = [f"no such file: {db}"]
    else:
        try:
            with open_memory(db, config, read_only=True) as mem:
                problems = list(mem.check())
                st = mem.stats()
        except MemsifError as e:
            problems = [str(e)]
    return {"ok": not problems, "problems": problems, "stats": st}


def _key_for(db: str, source: KeySource = KEY, *, confirm: bool = False) -> Key:
    """The key given for ``db`` (MEMSIF_KEY & co), else typed at a prompt on a terminal."""
    key = given_key(source) or asked_key(source, db, confirm=confirm)
    if key is None:
        raise click.UsageError(f"give the {source.what} of {db}: {source.hint()}")
    return key


def _exists(db: str) -> None:
    if not Path(db).exists():
        raise click.ClickException(f"no memory file at {db}")


@command()
@key_file_options
@output(lambda doc, **_: [f"encrypted {doc['db']}"])
def encrypt(db: str) -> dict[str, Any]:
    """Encrypt a plain memory file with the key given (MEMSIF_KEY, --key-file or --key-command; on a
    terminal it is asked for, twice). In place and crash-safe: a new file is written beside it,
    verified and renamed over it. Close every other program using the file first."""
    _exists(db)
    encryption.encrypt(db, _key_for(db, confirm=True))
    return {"db": db, "encrypted": True}


@command()
@key_file_options
@output(lambda doc, **_: [f"decrypted {doc['db']}: it is a plain SQLite file now, readable without a key"])
def decrypt(db: str) -> dict[str, Any]:
    """Decrypt an encrypted memory file (its key: MEMSIF_KEY, --key-file or --key-command, or asked
    for), in place and crash-safe as `encrypt`."""
    _exists(db)
    encryption.decrypt(db, _key_for(db))
    return {"db": db, "encrypted": False}


@command()
@key_file_options
@key_options(NEW_KEY, "the memory file from now on")
@output(lambda doc, **_: [f"changed the key of {doc['db']}"])
def rekey(db: str) -> dict[str, Any]:
    """Change the key of an encrypted memory file: the current key as for every command, the new one
    from MEMSIF_NEW_KEY, --new-key-file or --new-key-command (on a terminal it is asked for, twice).
    In place and crash-safe as `encrypt`."""
    _exists(db)
    encryption.rekey(db, _key_for(db), _key_for(db, NEW_KEY, confirm=True))
    return {"db": db, "encrypted": True}
