"""The documentation stays complete and true (after sqlite-utils' test_docs.py): every command is in
docs/cli.md (generated from click's help, and up to date), every public name of Memory has its
section in docs/python.md, the README stays short, its Quickstart is the two commands CI runs, its
Python example can be run twice without changing the memory, and its links lead somewhere."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from memsif_lite import Config, Memory

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = ("concepts", "cli", "python", "llm", "merge", "history", "languages", "reliability", "architecture",
         "benchmarks", "beyond-one-machine")


def _cli_reference():
    spec = importlib.util.spec_from_file_location("make_cli_reference", DOCS / "make_cli_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.S | re.M)


def _section(text: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert match, f"README has no '## {heading}' section"
    return match.group(1)


# -- the command line ----------------------------------------------------------------------------
def test_cli_reference_names_every_option_of_every_command():
    """What the generated reference must hold, whatever click version formats the help (CI installs
    the newest; exact text is checked by `python docs/make_cli_reference.py --check`)."""
    import click

    from memsif_lite.cli import main

    ref = _cli_reference()
    text = (DOCS / "cli.md").read_text(encoding="utf-8")

    def walk(cmd: click.Command, path: str):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    for path, cmd in walk(main, "memsif"):
        found = re.search(rf"^### `{re.escape(path)}`\n(.*?)(?=^### |\Z)", text, flags=re.S | re.M)
        assert found, f"no section for {path} in docs/cli.md: run `{ref.COMMAND}`"
        for param in cmd.params:
            for opt in (param.opts if isinstance(param, click.Option) else []):
                assert opt in found.group(1), f"{path} {opt} is not in docs/cli.md: run `{ref.COMMAND}`"


def test_every_command_and_subcommand_has_its_section_in_cli_md():
    ref = _cli_reference()
    paths = ref.command_paths()
    assert {"memsif", "memsif ingest", "memsif ask", "memsif merge", "memsif mcp", "memsif demo"} <= set(paths)
    headings = set(re.findall(r"^### `(memsif[^`]*)`$", (DOCS / "cli.md").read_text(encoding="utf-8"), flags=re.M))
    missing = [p for p in paths if p not in headings]
    assert not missing, f"not in docs/cli.md: {missing}; run `{ref.COMMAND}`"


def test_the_hand_written_cli_page_names_every_command():
    ref = _cli_reference()
    prose = (DOCS / "cli.md").read_text(encoding="utf-8").split("<!-- BEGIN GENERATED")[0]
    missing = [p for p in ref.command_paths()[1:] if not re.search(rf"^{re.escape(p)}\b", prose, flags=re.M)]
    assert not missing, f"add an example of {missing} to docs/cli.md's 'At a glance' block"


# -- the Python API --------------------------------------------------------------------------------
def _public_names(memory_file: Path, fake_embedder) -> list[str]:
    names = {n for n in vars(Memory) if not n.startswith("_")}
    with Memory(memory_file, embedder=fake_embedder) as mem:
        names |= {n for n in vars(mem) if not n.startswith("_")}
    return sorted(names)


def test_every_public_memory_method_and_attribute_is_documented(tmp_path, fake_embedder):
    names = _public_names(tmp_path / "m.db", fake_embedder)
    assert {"add", "remember", "ask", "merge_from", "path", "read_only"} <= set(names)
    headings = [line for line in (DOCS / "python.md").read_text(encoding="utf-8").splitlines()
                if line.startswith("#")]
    missing = [n for n in names if not any(re.search(rf"`{n}[`(]|`{n}`|, `{n}`", h) for h in headings)]
    assert not missing, f"docs/python.md has no heading for Memory.{', Memory.'.join(missing)}"


def test_every_config_field_the_docs_name_exists():
    fields = {f.name for f in dataclasses.fields(Config)} | {"from_file", "from_dict"}
    named = set()
    for page in [README, *DOCS.glob("*.md")]:
        text = page.read_text(encoding="utf-8")
        named |= {(page.name, n) for n in re.findall(r"Config\((\w+)=", text) + re.findall(r"Config\.(\w+)", text)}
    assert named, "the docs show Config somewhere"
    wrong = sorted((page, n) for page, n in named if n not in fields)
    assert not wrong, f"no such Config field: {wrong}"


# -- the README ------------------------------------------------------------------------------------
def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail to docs/"


def test_quickstart_is_the_two_commands_ci_runs():
    quickstart = _section(README.read_text(encoding="utf-8"), "Quickstart")
    two = "pip install . && memsif demo\npip install '.[test]' && python -m pytest -q\n"
    assert _blocks(quickstart, "bash") == [two]
    assert "pip install '.[test]' && python -m pytest -q" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _state(path: Path, embedder) -> dict:
    with Memory(path, embedder=embedder, read_only=True) as mem:
        return {
            "messages": [(m.id, m.speaker, m.text, m.at, m.session, m.source_id, m.utc_offset_min)
                         for m in mem.messages()],
            "segments": [(s.id, s.trajectory_id, s.message_ids, s.closed) for s in mem.segments()],
            "trajectories": [(t.id, t.segment_ids, t.message_ids) for t in mem.trajectories()],
            "facts": [(f.id, f.subject, f.type, f.stmt, f.valid_from, f.valid_to, f.superseded_by, f.message_ids,
                       tuple(mem.fact_history(f.id))) for f in mem.facts(include_superseded=True)],
            "active_facts": mem.active_facts(),
        }


def test_readme_python_example_run_twice_gives_the_same_memory(tmp_path, monkeypatch, capsys, embedder):
    blocks = _blocks(_section(README.read_text(encoding="utf-8"), "Python"), "python")
    assert len(blocks) == 1, "the README's Python section has one example"
    example = compile(blocks[0], "README.md (Python example)", "exec")
    monkeypatch.chdir(tmp_path)
    for name in ("MEMSIF_LLM", "MEMSIF_API_BASE", "MEMSIF_API_KEY", "MEMSIF_HOME", "MEMSIF_DB"):
        monkeypatch.delenv(name, raising=False)
    states, outputs, files = [], [], set()
    for _ in range(2):
        names: dict = {"__name__": "readme_example"}
        exec(example, names)  # noqa: S102 - the README's own example, offline
        assert names["answer"].text == "Maya lives in Porto" and names["answer"].extractive
        files = {p.name for p in tmp_path.iterdir()} - {"me.db-wal", "me.db-shm"}
        states.append(_state(tmp_path / "me.db", embedder))
        outputs.append(capsys.readouterr().out)
    assert files == {"me.db"}
    first, second = states
    assert len(first["messages"]) == 4 and first["facts"], "the example stores four messages and CoreFacts"
    assert first == second, "running the README's Python example again changed the memory"
    # what its comments promise
    assert "[True, True, True, True]" in outputs[0] and "[False, False, False, False]" in outputs[1]
    times = [m[3] for m in first["messages"]]
    assert times == sorted(times), "the example's messages are in time order (UTC)"


# -- links -----------------------------------------------------------------------------------------
def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _links(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"^```.*?^```$", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return [(target, anchor) for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text)
            if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", ["README.md"] + [f"docs/{p}.md" for p in PAGES])
def test_links_lead_to_files_and_headings_that_exist(page):
    source = ROOT / page
    assert source.is_file(), f"{page} is missing"
    for target, anchor in _links(source):
        dest = (source.parent / target).resolve() if target else source
        assert dest.exists(), f"{page} links to {target}, which does not exist"
        if anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", dest.read_text(encoding="utf-8"), flags=re.M)
            assert anchor in {_anchor(h) for h in headings}, f"{page} links to {target}#{anchor}: no such heading"


def test_readme_links_every_docs_page():
    linked = {target for target, _ in _links(README)}
    missing = [p for p in PAGES if f"docs/{p}.md" not in linked]
    assert not missing, f"README.md does not link docs/{missing}"
    assert sorted(p.stem for p in DOCS.glob("*.md")) == sorted(PAGES), "a docs/ page is not in PAGES (and README)"

