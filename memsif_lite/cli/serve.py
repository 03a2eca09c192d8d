"""``memsif mcp``: the memory served to an MCP client over stdio (it prints no document of its own)."""

from __future__ import annotations

import click

from .boundary import command
from .options import file_options, llm_options, open_memory

__all__ = ["mcp"]


@command("mcp")
@file_options
@llm_options
@click.option("--allow-forget", is_flag=True,
              help="Offer the forget tool (off by default: a model can be steered by what it reads).")
@click.option("--allow-undo", is_flag=True,
              help="Offer the undo tool (off by default, as --allow-forget).")
@click.option("--read-only", is_flag=True,
              help="Open the file read-only and offer the reading tools only (search, context, facts, stats).")
def mcp(db: str, config: str | None, llm: str | None, api_base: str | None, api_key: str | None,
        allow_forget: bool, allow_undo: bool, read_only: bool) -> None:
    """Serve the memory to an MCP client (Claude Desktop, Cursor, VS Code...) over stdio.

    Tools: remember, search, context, ask, facts, history, stats, forget with --allow-forget and undo
    with --allow-undo. The file
    is created if needed (not with --read-only). Needs the mcp extra: pip install 'memsif_lite[mcp]'.
    """
    if read_only and (allow_forget or allow_undo):
        raise click.UsageError("--read-only and --allow-forget / --allow-undo contradict each other")
    from memsif_lite import mcp_server  # the MCP SDK is imported only by this command

    mem = open_memory(db, config, llm, api_base, api_key, create=not read_only, read_only=read_only,
                      prompt=False)  # stdin is the client's: an encrypted file's key comes from MEMSIF_KEY & co
    mcp_server.serve(mem, allow_forget=allow_forget, allow_undo=allow_undo)
