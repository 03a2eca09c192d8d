"""Regenerate the command reference at the end of docs/cli.md from click's own help.

    python docs/make_cli_reference.py           # rewrite docs/cli.md's generated part
    python docs/make_cli_reference.py --check   # exit 1 if it is out of date (tests/test_docs.py checks)

Only the part between the BEGIN/END markers is written; the text above them is edited by hand.
The help is rendered at a fixed width, so the output does not depend on the terminal.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import click

CLI_MD = Path(__file__).resolve().parent / "cli.md"
BEGIN = "<!-- BEGIN GENERATED: python docs/make_cli_reference.py -->"
END = "<!-- END GENERATED -->"
WIDTH = 100
COMMAND = "python docs/make_cli_reference.py"


def commands(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[click.Command, click.Context]]:
    """``cmd`` and every command and subcommand under it, depth first, names sorted."""
    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from commands(sub, _context(sub, name, ctx))


def _context(cmd: click.Command, name: str, parent: click.Context | None = None) -> click.Context:
    """The context ``memsif ... NAME -h`` would get (its settings, e.g. ``-h``), at a fixed width."""
    return cmd.make_context(name, [], parent=parent, resilient_parsing=True,
                            terminal_width=WIDTH, max_content_width=WIDTH)


def command_paths() -> list[str]:
    """Every command's full name, ``memsif`` first: ``memsif``, ``memsif add``, ..."""
    from memsif_lite.cli import main

    return [ctx.command_path for _, ctx in commands(main, _context(main, "memsif"))]


def render() -> str:
    """The generated reference: one section per command with its ``--help``."""
    from memsif_lite.cli import main

    out = [BEGIN, "", "## Reference (generated from `--help`)", ""]
    for cmd, ctx in commands(main, _context(main, "memsif")):
        out += [f"### `{ctx.command_path}`", "", "```text", cmd.get_help(ctx).rstrip(), "```", ""]
    out.append(END)
    return "\n".join(out) + "\n"


def updated(text: str) -> str:
    """``text`` (docs/cli.md) with its generated part replaced by :func:`render`'s."""
    if BEGIN not in text:
        return text.rstrip("\n") + "\n\n" + render()
    head = text[:text.index(BEGIN)]
    tail = text[text.index(END) + len(END):].lstrip("\n") if END in text else ""
    return head + render() + (("\n" + tail) if tail else "")


def main(argv: list[str]) -> int:
    current = CLI_MD.read_text(encoding="utf-8")
    new = updated(current)
    if "--check" in argv:
        if new != current:
            print(f"docs/cli.md is out of date: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if new != current:
        CLI_MD.write_text(new, encoding="utf-8")
        print("docs/cli.md updated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
