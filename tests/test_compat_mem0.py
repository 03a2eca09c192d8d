"""The mem0-shaped facade (memsif_lite.compat.mem0): mem0's OSS usage examples ported to it, run
with the bundled ONNX model on real files under a memory home; users kept apart; hostile names
and ids refused; mem0's JSON export imported (API and `memsif import-mem0`)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import raw
from memsif_lite import InvalidInputError, NotFoundError, memory_path
from memsif_lite.cli import main
from memsif_lite.compat.mem0 import Memory, import_mem0
from memsif_lite.compat.mem0_model import MemoryId

MOVIES = [  # mem0's OSS Python quickstart
    {"role": "user", "content": "I'm planning to watch a movie tonight. Any recommendations?"},
    {"role": "assistant", "content": "How about a thriller movies? They can be quite engaging."},
    {"role": "user", "content": "I'm not a big fan of thriller movies but I love sci-fi movies."},
    {"role": "assistant",
     "content": "Got it! I'll avoid thriller recommendations and suggest sci-fi movies in the future."},
]
ITEM_KEYS = {"id", "memory", "hash", "metadata", "created_at", "updated_at", "user_id"}


def files_under(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


@pytest.fixture
def m(tmp_path):
    with Memory(tmp_path / "home") as mem:
        yield mem


def test_the_oss_quickstart(m):
    added = m.add(MOVIES, user_id="alice", metadata={"category": "movie_recommendations"})
    assert [r["event"] for r in added["results"]] == ["ADD"] * 4
    assert [r["memory"] for r in added["results"]] == [x["content"] for x in MOVIES]
    m.add(MOVIES[:2], user_id="alice", agent_id="movie-assistant", run_id="session-001",
          metadata={"category": "movie_recommendations"})
    m.add("I'm working on improving my tennis skills. Suggest some things to watch.", user_id="alice", infer=False)

    everything = m.get_all(user_id="alice")["results"]   # the user's file and the user's per-agent file
    assert {r["memory"] for r in everything} >= {x["content"] for x in MOVIES}
    assert all(ITEM_KEYS <= set(r) and r["user_id"] == "alice" for r in everything)
    with_agent = [r for r in everything if r.get("agent_id") == "movie-assistant"]
    assert len(with_agent) == 2 and {r["run_id"] for r in with_agent} == {"session-001"}
    assert len(m.get_all(user_id="alice", agent_id="movie-assistant", run_id="session-001")["results"]) == 2

    one = everything[0]
    assert m.get(one["id"]) == one                                     # ids round-trip

    for found in (m.search("What do you know about me?", user_id="alice")["results"],
                  m.search("What do you know about me?", filters={"user_id": "alice"})["results"]):
        assert found and all(ITEM_KEYS | {"score"} <= set(r) for r in found)
        assert [r["score"] for r in found] == sorted((r["score"] for r in found), reverse=True)
    best = m.search("Which movies does alice love?", user_id="alice", limit=3)["results"]
    assert len(best) == 3 and any("sci-fi" in r["memory"] for r in best)
    tennis = m.search("tennis", user_id="alice", limit=1)["results"][0]
    assert "tennis" in tennis["memory"] and tennis["metadata"] is None

    target = next(r for r in everything if r["memory"] == MOVIES[2]["content"])
    assert m.update(target["id"], "I love India, it is my favorite country.") == {
        "message": "Memory updated successfully!"}
    now = m.get(target["id"])
    assert now["memory"] == "I love India, it is my favorite country."
    assert now["metadata"] == {"category": "movie_recommendations"} and now["updated_at"] is not None
    hist = m.history(target["id"])
    assert [(h["event"], h["old_memory"], h["new_memory"], h["is_deleted"]) for h in hist] == [
        ("ADD", None, MOVIES[2]["content"], False),
        ("UPDATE", MOVIES[2]["content"], "I love India, it is my favorite country.", False)]
    assert all(h["memory_id"] == target["id"] for h in hist)
    assert MOVIES[2]["content"] not in {r["memory"] for r in m.get_all(user_id="alice")["results"]}

    assert m.delete(target["id"]) == {"message": "Memory deleted successfully!"}
    assert m.get(target["id"]) is None and m.history(target["id"]) == []
    with pytest.raises(NotFoundError):
        m.delete(target["id"])
    assert m.delete_all(user_id="alice") == {"message": "Memories deleted successfully!"}
    assert m.get_all(user_id="alice") == {"results": []}


def test_the_newer_quickstart_and_metadata_filters(m):
    m.add([{"role": "user", "content": "Hi, I'm Alex. I love basketball and gaming."},
           {"role": "assistant", "content": "Hey Alex! I'll remember your interests."}], user_id="alex")
    m.add("I prefer tea over coffee.", user_id="alex", metadata={"category": "food"})
    found = m.search("What do you know about me?", filters={"user_id": "alex"})["results"]
    assert any("basketball" in r["memory"] for r in found)
    food = m.search("drinks", filters={"user_id": "alex", "category": "food"})["results"]
    assert [r["memory"] for r in food] == ["I prefer tea over coffee."]
    assert [r["memory"] for r in m.get_all(user_id="alex", filters={"category": "food"})["results"]] == [
        "I prefer tea over coffee."]
    assert len(m.get_all(user_id="alex", limit=1)["results"]) == 1
    assert m.search("tea", user_id="alex", threshold=1.0)["results"][0]["score"] == 1.0
    with pytest.raises(InvalidInputError, match="only equality"):
        m.search("tea", filters={"user_id": "alex", "category": {"in": ["food"]}})


def test_corefacts_are_memories_with_their_history(m, tmp_path):
    m.add("I live in Lisbon, near the castle.", user_id="Maya", run_id="1")
    second = m.add("I moved to Porto! I signed the lease last week.", user_id="Maya", run_id="2")["results"]
    lisbon = next(r for r in second if r["id"].startswith("f:"))   # the first segment closed: its fact
    assert (lisbon["event"], lisbon["memory"]) == ("ADD", "Maya lives in Lisbon")
    third = m.add("Any tips for a housewarming party?", user_id="Maya", run_id="3")["results"]
    events = {(r["event"], r["memory"]) for r in third}
    assert ("ADD", "Maya lives in Porto") in events and ("DELETE", "Maya lives in Lisbon") in events
    porto = next(r["id"] for r in third if r["memory"] == "Maya lives in Porto")

    top = m.search("Where does Maya live?", user_id="maya", limit=3)["results"]
    assert top[0]["id"] == porto and top[0]["metadata"]["memsif"]["kind"] == "core_fact"
    current = {r["memory"] for r in m.get_all(user_id="maya")["results"]}
    assert "Maya lives in Porto" in current and "Maya lives in Lisbon" not in current
    assert m.get(lisbon["id"])["metadata"]["memsif"]["superseded_by"] is not None
    assert [(h["event"], h["is_deleted"]) for h in m.history(lisbon["id"])] == [("ADD", False), ("DELETE", True)]
    assert m.history(lisbon["id"])[1]["old_memory"] == "Maya lives in Lisbon"

    listed = m.get_all(user_id="maya")                                  # imported elsewhere: the messages,
    (tmp_path / "maya.json").write_text(json.dumps(listed))             # not the facts derived from them
    assert import_mem0(tmp_path / "maya.json", home=tmp_path / "copy")["memories"] == 3

    with pytest.raises(InvalidInputError, match="not edited by hand"):
        m.update(porto, "Maya lives in Braga")
    m.delete(porto)
    assert m.get(porto) is None


def test_users_are_kept_apart(tmp_path):
    home = tmp_path / "home"
    with Memory(home) as m:
        m.add("I keep bees in my garden.", user_id="a", infer=False)
        m.add("The agent is called Bea.", user_id="a", agent_id="helper", infer=False)
        b = m.add("I collect stamps from Peru.", user_id="b", infer=False)["results"][0]
        m.add("I am an agent that happens to share a's name.", agent_id="a", infer=False)
    untouched = {k: v for k, v in files_under(home).items() if not k.startswith("users/a")}
    assert set(untouched) >= {"users/b.db", "agents/a.db"}
    with Memory(home) as m:
        assert all("bees" not in r["memory"] for r in m.search("bees", user_id="b")["results"])
        forged = b["id"].replace(":b:", ":a:")                       # b's key, a's file: nothing there
        assert m.get(forged) is None
        m.delete_all(user_id="a")
        assert m.get_all(user_id="a") == {"results": []}
        assert m.get_all(user_id="a", agent_id="helper") == {"results": []}   # the user's agent file too
        assert [r["memory"] for r in m.get_all(user_id="b")["results"]] == ["I collect stamps from Peru."]
        assert m.get(b["id"])["memory"] == "I collect stamps from Peru."
        assert len(m.get_all(agent_id="a")["results"]) == 1
    assert {k: v for k, v in files_under(home).items() if not k.startswith("users/a")} == untouched


@pytest.mark.parametrize("name", ["../x", "..", "/etc/passwd", "a/b", "a\\b", "", ".hidden", "x\x00y", "CON", "é"])
def test_hostile_user_ids_are_refused_and_create_nothing(tmp_path, name):
    home = tmp_path / "home"
    with Memory(home) as m:
        for call in (lambda: m.add("hello", user_id=name), lambda: m.search("hello", user_id=name),
                     lambda: m.get_all(user_id=name), lambda: m.delete_all(user_id=name),
                     lambda: m.add("hello", user_id="ok", agent_id=name),
                     lambda: m.get_all(filters={"user_id": name})):
            with pytest.raises(InvalidInputError):
                call()
    assert list(tmp_path.iterdir()) == []                              # no home, no file, nothing anywhere


@pytest.mark.parametrize("memory_id", ["m:0123456789abcdef0123456789abcdef:../x:", "f:1:..:", "f:0:a:", "f:1::",
                                       "m:xyz:a:", "1", "", "m:0123456789abcdef0123456789abcdef:a", 5, None])
def test_malformed_memory_ids_are_refused(m, memory_id):
    for call in (m.get, m.delete, m.history, lambda i: m.update(i, "x")):
        with pytest.raises(InvalidInputError):
            call(memory_id)


names = st.one_of(st.sampled_from(["alice", "Bob", "a.b", "x@y", "../x", "CON", "a:b"]), st.text(max_size=20),
                  st.text(alphabet=st.sampled_from(list("aZ09._-@+/\\:\x00 ~")), max_size=10))


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from("mf"), user=st.one_of(st.none(), names), agent=st.one_of(st.none(), names),
       key=st.one_of(st.uuids().map(lambda u: u.hex), st.integers(1, 10**17).map(str), names))
def test_an_id_names_one_file_inside_the_home_or_is_refused(kind, user, agent, key):
    home = Path("/nonexistent/home")
    text = f"{kind}:{key}:{user or ''}:{agent or ''}"
    try:
        mid = MemoryId.parse(text)
    except InvalidInputError:
        return
    assert MemoryId.parse(str(mid)) == mid                                # round trip
    path = memory_path(mid.scope.user, mid.scope.agent, home=home)
    assert path.parent in (home / "users", home / "agents", home / "users" / (mid.scope.user or "?"))
    assert ".." not in path.parts and path.name == f"{mid.scope.agent or mid.scope.user}.db"


def test_scope_and_argument_errors(m):
    with pytest.raises(InvalidInputError, match="user_id or agent_id"):
        m.add("hi", run_id="r1")
    with pytest.raises(InvalidInputError, match="user_id or agent_id"):
        m.get_all()
    with pytest.raises(InvalidInputError, match="twice"):
        m.search("hi", user_id="a", filters={"user_id": "b"})
    with pytest.raises(InvalidInputError, match="role"):
        m.add([{"role": "tool", "content": "x"}], user_id="a")
    with pytest.raises(InvalidInputError, match="metadata"):
        m.add("hi", user_id="a", metadata={"blob": "x" * 300})
    with pytest.raises(InvalidInputError):
        m.add("hi", user_id="a", metadata={"f": float("nan")})
    assert m.add([{"role": "system", "content": "be nice"}], user_id="a") == {"results": []}
    with pytest.raises(NotFoundError):
        m.update(f"m:{uuid.uuid4().hex}:a:", "x")
    with pytest.raises(InvalidInputError, match="memory_type"):
        m.add("hi", user_id="a", memory_type="procedural_memory")
    with pytest.raises(TypeError):
        m.search("hi", user_id="a", limt=3)                            # a typo is not silently ignored
    with pytest.raises(InvalidInputError, match="reset"):
        m.reset()
    assert m.get_all(user_id="nobody") == {"results": []} and not (m.home / "users" / "nobody.db").exists()


def test_with_an_llm_search_asks_it_nothing(tmp_path, llm_server):
    """With an LLM configured, add may ask it (titles, facts...), search never does: a CoreFact
    ranks by its source messages, as mem0's search asks no LLM either."""
    with Memory(tmp_path / "home", llm="openai/test-model", llm_kwargs=llm_server.llm_kwargs(),
                process="inline") as m:
        m.add("I live in Lisbon, near the castle.", user_id="Maya", run_id="1")
        m.add("I moved to Porto! I signed the lease last week.", user_id="Maya", run_id="2")
        m.add("Any tips for a housewarming party?", user_id="Maya", run_id="3")
        asked = len(llm_server.requests)
        found = m.search("Where does Maya live?", user_id="maya", limit=4)["results"]
        assert len(llm_server.requests) == asked
        facts = [r["memory"] for r in found if r["id"].startswith("f:")]
        assert "Maya lives in Porto" in facts and "Maya lives in Lisbon" not in facts


def test_from_config_uses_the_home_and_the_llm(tmp_path, llm_server):
    config = {"home": str(tmp_path / "home"), "vector_store": {"provider": "qdrant"},
              "llm": {"provider": "openai", "config": {"model": "test-model", "api_key": "sk-test",
                                                       "openai_base_url": llm_server.url}}}
    with Memory.from_config(config) as m:
        m.add("I live in Lisbon, near the castle.", user_id="a", run_id="1")
        m.add("I moved to Porto!", user_id="a", run_id="2")             # closes the first segment: LLM steps
    assert (tmp_path / "home" / "users" / "a.db").is_file()
    assert llm_server.requests and {r["model"] for r in llm_server.requests} == {"test-model"}
    for bad in ({"llm": {"provider": "openai", "config": {}}}, "home"):
        with pytest.raises(InvalidInputError):
            Memory.from_config(bad)


EXPORT = {"results": [
    {"id": "892db2ae-06d9-49e5-8b3e-585ef9b85b8e", "memory": "Loves sci-fi movies", "hash": "x",
     "metadata": {"category": "movies"}, "categories": ["entertainment"], "created_at": "2024-07-20T01:30:50-07:00",
     "updated_at": "2024-07-21T08:00:00-07:00", "user_id": "alice"},
    {"id": "mem_2", "memory": "Is vegetarian", "user_id": "bob", "created_at": "2024-07-21T10:00:00Z"},
    {"memory": "Prefers short answers", "user_id": "bob", "agent_id": "helper", "run_id": "r1"},
]}


def test_import_mem0_round_trip_and_idempotent(tmp_path):
    export, home = tmp_path / "export.json", tmp_path / "home"
    export.write_text(json.dumps(EXPORT))
    done = import_mem0(export, home=home)
    assert (done["memories"], done["new"], done["already_present"]) == (3, 3, 0)
    assert sorted(Path(p).relative_to(home).as_posix() for p in done["files"]) == [
        "users/alice.db", "users/bob.db", "users/bob/helper.db"]
    before = files_under(home)
    again = import_mem0(export, home=home)
    assert (again["new"], again["already_present"]) == (0, 3)
    assert set(files_under(home)) == set(before)                        # no file more
    with raw(home / "users" / "alice.db") as con:
        assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
    with Memory(home) as m:
        alice = m.get_all(user_id="alice")["results"]
        assert [(r["memory"], r["metadata"], r["created_at"], r["updated_at"]) for r in alice] == [
            ("Loves sci-fi movies", {"category": "movies", "categories": ["entertainment"]},
             "2024-07-20T08:30:50+00:00", "2024-07-21T15:00:00+00:00")]
        assert alice[0]["id"] == f"m:{uuid.UUID(EXPORT['results'][0]['id']).hex}:alice:"
        run = m.get_all(user_id="bob", agent_id="helper", run_id="r1")["results"]
        assert [r["memory"] for r in run] == ["Prefers short answers"]
        assert {r["memory"] for r in m.get_all(user_id="bob")["results"]} == {"Is vegetarian", "Prefers short answers"}
        # what the facade lists imports back as it was (get_all's output is mem0's export format)
        listed = m.get_all(user_id="bob")
    (tmp_path / "again.json").write_text(json.dumps(listed))
    copy = import_mem0(tmp_path / "again.json", home=tmp_path / "copy")
    assert copy["new"] == 2
    with Memory(tmp_path / "copy") as m2:
        assert {(r["id"], r["memory"], r["created_at"]) for r in m2.get_all(user_id="bob")["results"]} == {
            (r["id"], r["memory"], r["created_at"]) for r in listed["results"]}


@pytest.fixture(scope="module")
def imported_home(tmp_path_factory):
    d = tmp_path_factory.mktemp("mem0import")
    (d / "good.json").write_text(json.dumps([{"memory": "I like tea", "user_id": "a"}]))
    import_mem0(d / "good.json", home=d / "home")
    return d


@pytest.mark.parametrize("content, match", [
    (b"{not json", "not a JSON export"),
    (b"\xff\xfe", "not a JSON export"),
    (b'"text"', "expected a list"),
    (b'{"data": []}', "expected a list"),
    (json.dumps([{"user_id": "a"}]).encode(), "memory 0: 'memory'"),
    (json.dumps([{"memory": "x"}]).encode(), "memory 0: give user_id or agent_id"),
    (json.dumps([{"memory": "x", "run_id": "r"}]).encode(), "memory 0: give user_id or agent_id"),
    (json.dumps([{"memory": "ok", "user_id": "a"}, {"memory": "x", "user_id": "../x"}]).encode(), "memory 1: user"),
    (json.dumps([{"memory": "x", "user_id": "a", "created_at": "yesterday"}]).encode(), "memory 0"),
    (json.dumps([{"memory": "x", "user_id": "a", "metadata": [1]}]).encode(), "memory 0: metadata"),
    (json.dumps([{"memory": "x", "user_id": "a", "categories": "food"}]).encode(), "memory 0: categories"),
    (json.dumps([{"memory": "x", "user_id": "a", "role": "tool"}]).encode(), "memory 0: role"),
    (json.dumps([3]).encode(), "memory 0: expected an object"),
    (json.dumps([{"memory": "x", "user_id": "a", "metadata": {"k": "v" * 300}}]).encode(), "memory 0: metadata too"),
])
def test_import_mem0_refuses_malformed_input_and_writes_nothing(imported_home, content, match):
    home = imported_home / "home"
    before = files_under(home)
    bad = imported_home / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(InvalidInputError, match=match):
        import_mem0(bad, home=home)
    assert files_under(home) == before


def run_cli(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def test_cli_import_mem0(tmp_path):
    export, home = tmp_path / "export.json", tmp_path / "home"
    export.write_text(json.dumps(EXPORT))
    first = run_cli("import-mem0", export, "--home", home, "--json")
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert (doc["memories"], doc["new"]) == (3, 3)
    again = run_cli("import-mem0", export, env={"MEMSIF_HOME": str(home)})
    assert again.exit_code == 0 and "3 memories" in again.stdout and "0 new, 3 already there" in again.stdout
    shown = run_cli("messages", "--user", "alice", "--home", home, "--json")
    assert json.loads(shown.stdout)["messages"][0]["text"] == "Loves sci-fi movies"
    (tmp_path / "bad.json").write_text('[{"memory": "x", "user_id": "../etc"}]')
    bad = run_cli("import-mem0", tmp_path / "bad.json", "--home", home)
    assert bad.exit_code == 1 and bad.stderr.startswith("Error: memory 0: user name") and "Traceback" not in bad.output
    missing = run_cli("import-mem0", tmp_path / "nope.json", "--home", home)
    assert missing.exit_code == 2


def test_import_memsif_lite_does_not_import_compat():
    code = "import sys, memsif_lite; sys.exit('memsif_lite.compat' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_docs_example_runs_as_it_says(tmp_path, monkeypatch, capsys):
    text = (Path(__file__).resolve().parent.parent / "docs" / "mem0.md").read_text(encoding="utf-8")
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(example.splitlines()) <= 15 and "# from mem0 import Memory" in example
    monkeypatch.setenv("MEMSIF_HOME", str(tmp_path / "home"))
    names: dict = {"__name__": "mem0_doc_example"}
    exec(compile(example, "docs/mem0.md", "exec"), names)  # noqa: S102 - the page's own example, offline
    out = capsys.readouterr().out
    assert "('UPDATE', \"I'm not a big fan of thriller movies but I love sci-fi movies.\", " \
           "'I love sci-fi movies and documentaries.')" in out
    assert (tmp_path / "home" / "users" / "alice.db").is_file()
    with Memory(tmp_path / "home") as m:
        assert m.get_all(user_id="alice") == {"results": []}
