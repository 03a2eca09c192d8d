"""The OpenAI Agents SDK adapter against the real SDK: its Runner drives a model implemented here
(the SDK's own Model interface, no network), with a MemsifSession and the recall tool."""

from __future__ import annotations

import asyncio
import json

import pytest

agents = pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from memsif_lite import InvalidInputError, Memory  # noqa: E402
from memsif_lite.integrations import Speakers  # noqa: E402
from memsif_lite.integrations.openai_agents import MemsifSession, item_text, recall_tool  # noqa: E402


def _say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id="msg_1", role="assistant", status="completed", type="message",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


class RecallingModel(Model):
    """A model that asks ``recall`` about every question it is given, then answers with what the
    tool returned; a statement it only acknowledges. It records every input it is sent."""

    def __init__(self) -> None:
        self.inputs: list = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None, **_):
        self.inputs.append(input)
        last = input[-1] if isinstance(input, list) else {"role": "user", "content": input}
        if last.get("type") == "function_call_output":
            out = [_say(f"From memory: {last['output']}")]
        elif str(last.get("content", "")).rstrip().endswith("?"):
            args = json.dumps({"question": last["content"]})
            out = [ResponseFunctionToolCall(type="function_call", call_id="call_1", name="recall", arguments=args)]
        else:
            out = [_say("Noted.")]
        return ModelResponse(output=out, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):  # pragma: no cover - the tests do not stream
        raise NotImplementedError


def test_second_turn_recalls_the_first_through_the_session(tmp_path, embedder):
    model = RecallingModel()
    session = MemsifSession.open("chat-1", user="maya", home=tmp_path, embedder=embedder)
    try:
        agent = Agent(name="Assistant", model=model, tools=[recall_tool(session.memory)])
        offline = RunConfig(tracing_disabled=True)  # no trace export
        Runner.run_sync(agent, "My cat is called Mochi and she loves tuna.", session=session, run_config=offline)
        result = Runner.run_sync(agent, "What is my cat called?", session=session, run_config=offline)
        assert "Mochi" in result.final_output
        tool_outputs = [i for i in model.inputs[-1] if isinstance(i, dict) and i.get("type") == "function_call_output"]
        assert len(tool_outputs) == 1 and "Mochi" in tool_outputs[0]["output"]
        # the second turn's model saw the first turn through the session's history
        assert {"role": "user", "content": "My cat is called Mochi and she loves tuna."} in model.inputs[-2]
        items = asyncio.run(session.get_items())
        # the call and its output come back in order, as the SDK gave them, for it to replay
        assert [i.get("role", i.get("type")) for i in items] == [
            "user", "assistant", "user", "function_call", "function_call_output", "assistant"]
        call, output = items[3], items[4]
        assert call["name"] == "recall" and call["call_id"] == output["call_id"] == "call_1"
        assert json.loads(call["arguments"]) == {"question": "What is my cat called?"}
        assert "Mochi" in output["output"]
        # ... but not as things someone said: 4 messages, and neither search nor context sees the call
        assert all(m.session == "chat-1" for m in session.memory.messages())
        assert {m.speaker for m in session.memory.messages()} == {"maya", "assistant"}
        assert len(session.memory.messages()) == 4
        assert all("call_1" not in (r.text or "") for r in session.memory.search("call_1 function_call recall"))
        assert "call_1" not in session.memory.context("function_call_output call_1").text
        # a third turn replays the call and its output to the model
        Runner.run_sync(agent, "Thanks!", session=session, run_config=offline)
        assert [i.get("type") for i in model.inputs[-1] if isinstance(i, dict)].count("function_call_output") == 1
    finally:
        session.close()
    assert (tmp_path / "users" / "maya.db").exists()


def test_session_protocol_get_pop_clear(tmp_path, fake_embedder):
    with Memory(tmp_path / "m.db", embedder=fake_embedder) as mem:
        s = MemsifSession("s1", mem, speakers=Speakers(user="Ana", assistant="Bot"))
        other = MemsifSession("s2", mem)
        assert isinstance(s, agents.memory.Session)  # the SDK's runtime-checkable protocol

        async def run():
            await s.add_items([{"role": "user", "content": "hi"},
                               {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                               {"role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
                               {"role": "user", "content": "hi"}])  # a repeated message is stored again
            await other.add_items([{"role": "user", "content": "elsewhere"}])
            call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
            assert await s.get_items() == [{"role": "user", "content": "hi"}, call,
                                           {"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}]
            assert await s.get_items(limit=1) == [{"role": "user", "content": "hi"}]
            assert await s.get_items(limit=0) == []
            assert await s.pop_item() == {"role": "user", "content": "hi"}
            assert [m.speaker for m in mem.messages(sessions=["s1"])] == ["Ana", "Bot"]
            output = {"type": "function_call_output", "call_id": "c", "output": "42"}
            await s.add_items([output])
            assert (await s.get_items())[-1] == output
            assert await s.pop_item() == output  # the last item, not the last message
            assert await s.get_items(limit=2) == [call, {"role": "assistant", "content": "hello"}]
            await s.clear_session()
            assert await s.get_items() == [] and await s.pop_item() is None
            assert await other.get_items() == [{"role": "user", "content": "elsewhere"}]

        asyncio.run(run())
        with pytest.raises(InvalidInputError):
            MemsifSession("", mem)
        with pytest.raises(InvalidInputError):
            asyncio.run(s.get_items(limit=-1))


def test_item_text():
    assert item_text({"role": "user", "content": [{"type": "input_text", "text": "a"},
                                                  {"type": "input_image", "image_url": "x"},
                                                  {"type": "input_text", "text": "b"}]}) == "a\nb"
    assert item_text({"type": "function_call_output", "call_id": "c", "output": "x"}) is None
    assert item_text({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}) is None
