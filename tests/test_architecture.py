"""The shape the architecture promises (docs/architecture.md), checked so it stays true:
no import cycles, no private names across modules, SQL only in the data-access layer, a facade
without public collaborators, SQLite errors mapped into the documented hierarchy, and files
opened with the embedding model they record."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from fakes import FakeEmbedder
from memsif_lite import (Memory, MemsifError, StorageBusyError, StorageCorruptError, StorageError, StorageFullError,
                         register_embedder, store)
from memsif_lite.errors import MemoryFileError

PKG = Path(__file__).resolve().parent.parent / "memsif_lite"


def _modules() -> dict[str, ast.Module]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(f.read_text(encoding="utf-8"))
    return out


def _imports(name: str, tree: ast.Module, is_pkg: bool) -> list[tuple[str, list[str]]]:
    """(imported module, names) for every relative import of a module."""
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            root = base[: len(base) - (node.level - 1)]
            target = ".".join(root + ([node.module] if node.module else []))
            out.append((target, [a.name for a in node.names]))
    return out


def test_no_import_cycles_and_no_private_names_across_modules():
    mods = _modules()
    pkgs = {n for n in mods if (PKG.parent / n.replace(".", "/") / "__init__.py").exists()}
    graph: dict[str, set[str]] = {}
    for name, tree in mods.items():
        for target, names in _imports(name, tree, name in pkgs):
            for n in names:
                assert not (n.startswith("_") and not n.startswith("__")), f"{name} imports private {target}.{n}"
            deps = {f"{target}.{n}" for n in names if f"{target}.{n}" in mods} or {target}
            graph.setdefault(name, set()).update(d for d in deps if d != "memsif_lite")
        for node in ast.walk(tree):  # module._private attribute access on an imported module
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and node.value.id in {"store", "prompts", "pipelines"}:
                raise AssertionError(f"{name} uses private {node.value.id}.{node.attr}")

    done: set[str] = set()  # modules whose every import path was followed: no cycle through them

    def visit(n: str, stack: list[str]) -> None:
        for d in graph.get(n, ()):
            assert d not in stack, "import cycle: " + " -> ".join(stack[stack.index(d):] + [d])
            if d not in done:
                visit(d, stack + [d])
        done.add(n)

    for n in graph:
        visit(n, [n])


def test_sql_lives_in_the_data_access_layer_and_store_only():
    offenders = [f"{f.relative_to(PKG)}:{i}" for f in PKG.rglob("*.py")
                 if f.parent.name != "db" and f.name != "store.py"
                 for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if "execute(" in line]
    assert offenders == []


def test_memory_is_a_thin_facade_with_no_public_collaborators(memory):
    mem = memory()
    public = {k for k in vars(mem) if not k.startswith("_")}
    assert public == {"path", "config", "read_only"}
    # 250 lines until issues 23/24 added remember(), forget(source_id=) and read-only reads that
    # write nothing (each method still: check, lock, delegate); 300 since issue 29 added view(), 330
    # since issue 27 added changes(), undo() and as_of for segments/trajectories, 340 since issue 28
    # added key= (encryption), 355 since issue 30 added add_item(), items() and forget(item_id=), 362
    # since issue 31 added compact()
    assert len((PKG / "memory.py").read_text(encoding="utf-8").splitlines()) <= 362


def test_sqlite_errors_are_mapped_into_the_hierarchy():
    cases = [(apsw.BusyError("busy"), StorageBusyError), (apsw.FullError("full"), StorageFullError),
             (apsw.CorruptError("bad"), StorageCorruptError), (apsw.NotADBError("bad"), StorageCorruptError),
             (apsw.IOError("io"), StorageError)]
    for raised, expected in cases:
        with pytest.raises(expected) as err:
            with store.map_errors():
                raise raised
        assert isinstance(err.value, MemsifError) and err.value.__cause__ is raised


def test_busy_past_the_timeout_is_a_storage_busy_error(tmp_path):
    from memsif_lite import Config

    db = tmp_path / "busy.db"
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem.add("A", "first")
    other = apsw.Connection(str(db))
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        with Memory(db, embedder=FakeEmbedder(), config=Config(busy_timeout_ms=20)) as mem:
            with pytest.raises(StorageBusyError, match="locked by another process"):
                mem.add("A", "second")
            assert mem.stats()["messages"] == 1  # reading still works
    finally:
        other.execute("ROLLBACK")
        other.close()
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert [m.text for m in mem.messages()] == ["first"]


def test_a_damaged_file_is_a_memsif_error_never_an_apsw_one(tmp_path):
    db = tmp_path / "damaged.db"
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem.add_many([{"speaker": "A", "text": f"message {i} " + "x" * 500} for i in range(200)])
    data = bytearray(db.read_bytes())
    for off in range(8192, len(data) - 4096, 4096):  # scribble over the middle of every other page
        data[off + 100: off + 400] = b"\xff" * 300
    db.write_bytes(bytes(data))
    with pytest.raises(MemsifError):
        with Memory(db, embedder=FakeEmbedder()) as mem:
            mem.search("message")
            mem.check()


def test_a_file_opens_with_the_model_it_records(tmp_path):
    """Through the registry: no embedder argument needed to reopen (CLI and Python alike)."""
    made: list[str] = []

    def factory(name, levels):
        made.append(name)
        return FakeEmbedder(model_id=f"testfake:{name}", sem_levels=levels or (0.0, 1.0))

    register_embedder("testfake", factory)
    db = tmp_path / "reg.db"
    with Memory(db, embedder=FakeEmbedder(model_id="testfake:bow", sem_levels=(0.1, 0.9))) as mem:
        mem.add("Ana", "I swim at the city pool")
    with Memory(db) as mem:  # resolved from the file: prefix "testfake", recorded levels
        assert mem.search("pool")[0].text == "I swim at the city pool"
    assert made == ["bow"]
    from click.testing import CliRunner

    from memsif_lite.cli import main

    res = CliRunner().invoke(main, ["search", "--db", str(db), "pool", "--json"])
    assert res.exit_code == 0, res.output
    assert "city pool" in res.output


def test_a_file_with_an_unknown_model_gets_a_clear_error(tmp_path):
    db = tmp_path / "unknown.db"
    with Memory(db, embedder=FakeEmbedder(model_id="nobody-knows-this")) as mem:
        mem.add("A", "x")
    with pytest.raises(MemoryFileError, match="unknown embedding model 'nobody-knows-this'"):
        Memory(db)


@pytest.mark.skipif(shutil.which("ruff") is None and not Path(sys.executable).with_name("ruff").exists(),
                    reason="ruff is installed with the test extra")
def test_ruff_and_mypy_are_clean():
    root = PKG.parent
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", "memsif_lite", "tests", "benchmarks"], cwd=root,
                          capture_output=True, text=True)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    mypy = subprocess.run([sys.executable, "-m", "mypy"], cwd=root, capture_output=True, text=True)
    assert mypy.returncode == 0, mypy.stdout + mypy.stderr


def test_every_subpackage_is_packaged():
    """pyproject lists packages explicitly: a new subpackage missing there installs without it, and
    only a fresh install (CI) would notice (memsif_lite.steps once did)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((PKG.parent / "pyproject.toml").read_text(encoding="utf-8"))
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    assert found <= listed, f"not in pyproject's packages: {sorted(found - listed)}"
