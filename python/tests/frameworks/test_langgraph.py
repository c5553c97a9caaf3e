"""LangChain and LangGraph: a `@tool` in LangChain's prebuilt agent (create_agent) and in a
StateGraph's ToolNode, driven by langchain_core's GenericFakeChatModel with tool calls. The
tool runs more than once: a re-planned step, a retried turn on the same thread, and a tools
node that crashed after the email went out and is run again when the graph is resumed from
its InMemorySaver checkpoint. One email per key."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="langgraph is not installed (requirements/frameworks.txt)")
pytest.importorskip("langchain", reason="langchain is not installed (requirements/frameworks.txt)")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, ToolRuntime, tools_condition

from pg_idempotency import AsyncStore, InvalidArgument, Store, idempotent
from pg_idempotency.integrations.langchain import idempotent_tool

ARGS = {"to": "ann@example.com", "subject": "Your order \u00e9t\u00e9 #42"}


class ScriptedChatModel(GenericFakeChatModel):
    """The fake model answers its script whatever the tools; bind_tools keeps it as is."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self


def script(*messages: AIMessage) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter(messages))


def calls(call_id: str, args: dict[str, Any] = ARGS) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"id": call_id, "name": "send_email", "args": args}])


def tool_outputs(messages: Sequence[BaseMessage]) -> list[Any]:
    return [m.content for m in messages if isinstance(m, ToolMessage)]


def thread() -> RunnableConfig:
    return {"configurable": {"thread_id": f"order-{uuid.uuid4()}"}}


@pytest.fixture
def outbox() -> Iterator[list[tuple[str, str]]]:
    yield []


def sync_tool(store: Store, scope: str, outbox: list[tuple[str, str]]) -> Any:
    @tool
    @idempotent_tool(store=store, scope=scope)
    def send_email(to: str, subject: str, config: RunnableConfig) -> str:
        """Send an email.

        Args:
            to: The recipient's address.
            subject: The subject line.
        """
        outbox.append((to, subject))
        return f"message m-{len(outbox)} to {to}"

    return send_email


def async_tool(astore: AsyncStore, scope: str, outbox: list[tuple[str, str]]) -> Any:
    @tool
    @idempotent_tool(store=astore, scope=scope)
    async def send_email(to: str, subject: str, runtime: ToolRuntime) -> str:
        """Send an email."""
        outbox.append((to, subject))
        return f"message m-{len(outbox)} to {to}"

    return send_email


def test_the_schema_is_the_one_tool_builds_without_the_decorator() -> None:
    def send_email(to: str, subject: str, config: RunnableConfig) -> str:
        """Send an email.

        Args:
            to: The recipient's address.
            subject: The subject line.
        """
        return ""

    bare, adapted = tool(send_email), tool(idempotent_tool(send_email))
    assert (bare.name, bare.description, bare.args) == (adapted.name, adapted.description,
                                                        adapted.args)
    assert set(adapted.args) == {"to", "subject"}  # config is injected, not asked of the model
    assert adapted.tool_call_schema.model_json_schema() == bare.tool_call_schema.model_json_schema()


async def test_a_re_planned_step_in_the_prebuilt_agent_sends_one_email(
        astore: AsyncStore, scope: str, outbox: list[tuple[str, str]]) -> None:
    model = script(calls("call_Ab12Cd34Ef56Gh78Ij90Kl12"),
                   calls("call_Zz98Yy76Xx54Ww32Vv10Uu98", {"subject": ARGS["subject"],
                                                            "to": ARGS["to"]}),
                   AIMessage(content="Sent."))
    agent = create_agent(model, [async_tool(astore, scope, outbox)])
    out = await agent.ainvoke({"messages": [("user", "Email Ann")]}, thread())
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    first = f"message m-1 to {ARGS['to']}"
    assert tool_outputs(out["messages"]) == [first, first]
    assert out["messages"][-1].content == "Sent."


def test_a_retried_turn_on_the_same_thread_sends_one_email(
        store: Store, scope: str, outbox: list[tuple[str, str]]) -> None:
    """The process died after the tool ran, with its in-memory checkpoints: the turn is run
    again on the same thread, and the model names the call anew."""
    config = thread()
    agent = create_agent(script(calls("call_Ab12Cd34Ef56Gh78Ij90Kl12"), AIMessage(content="ok")),
                         [sync_tool(store, scope, outbox)], checkpointer=InMemorySaver())
    agent.invoke({"messages": [("user", "Email Ann")]}, config)
    again = create_agent(script(calls("call_Qq11Rr22Ss33Tt44Uu55Vv66"), AIMessage(content="ok")),
                         [sync_tool(store, scope, outbox)], checkpointer=InMemorySaver())
    out = again.invoke({"messages": [("user", "Email Ann")]}, config)
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    assert tool_outputs(out["messages"]) == [f"message m-1 to {ARGS['to']}"]

    # Another thread is another run: its email is sent.
    other = create_agent(script(calls("call_Ww77Xx88Yy99Zz00Aa11Bb22"), AIMessage(content="ok")),
                         [sync_tool(store, scope, outbox)])
    out = other.invoke({"messages": [("user", "Email Ann")]}, thread())
    assert tool_outputs(out["messages"]) == [f"message m-2 to {ARGS['to']}"]


class Crash(Exception):
    """The process dies after the tools ran, before LangGraph checkpointed their step."""


def test_a_tools_node_run_again_on_resume_sends_one_email(
        store: Store, scope: str, outbox: list[tuple[str, str]]) -> None:
    send_email = sync_tool(store, scope, outbox)
    tools = ToolNode([send_email])
    crashes = [Crash("killed after the email went out")]

    def run_tools(state: MessagesState, config: RunnableConfig) -> Any:
        out = tools.invoke(state, config)
        if crashes:
            raise crashes.pop()
        return out

    model = script(calls("call_Ab12Cd34Ef56Gh78Ij90Kl12"), AIMessage(content="Sent."))

    def agent(state: MessagesState) -> Any:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", run_tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=InMemorySaver())

    config = thread()
    with pytest.raises(Crash):
        app.invoke({"messages": [("user", "Email Ann")]}, config)
    assert len(outbox) == 1
    assert app.get_state(config).next == ("tools",)  # the checkpoint is before the tools

    out = app.invoke(None, config)  # resumed: the tools node runs again
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    assert tool_outputs(out["messages"]) == [f"message m-1 to {ARGS['to']}"]
    assert out["messages"][-1].content == "Sent."


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_the_same_call_twice_in_one_turn_sends_one_email(
        store: Store, astore: AsyncStore, scope: str, outbox: list[tuple[str, str]],
        flavour: str) -> None:
    """The model asks for the call twice in one message: ToolNode runs both at once. With
    wait=, the second waits for the first one's result instead of raising InProgress."""
    if flavour == "sync":
        @tool
        @idempotent_tool(store=store, scope=scope, wait=30)
        def send_email(to: str, subject: str, config: RunnableConfig) -> str:
            """Send an email."""
            outbox.append((to, subject))
            return f"message m-{len(outbox)} to {to}"
    else:
        @tool
        @idempotent_tool(store=astore, scope=scope, wait=30)
        async def send_email(to: str, subject: str, config: RunnableConfig) -> str:
            """Send an email."""
            outbox.append((to, subject))
            return f"message m-{len(outbox)} to {to}"

    both = AIMessage(content="", tool_calls=[
        {"id": "call_Ab12Cd34Ef56Gh78Ij90Kl12", "name": "send_email", "args": ARGS},
        {"id": "call_Zz98Yy76Xx54Ww32Vv10Uu98", "name": "send_email", "args": ARGS}])
    agent = create_agent(script(both, AIMessage(content="ok")), [send_email])
    out = await agent.ainvoke({"messages": [("user", "Email Ann")]}, thread())
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    first = f"message m-1 to {ARGS['to']}"
    assert tool_outputs(out["messages"]) == [first, first]


def test_plain_idempotent_under_tool_keys_on_the_arguments(
        store: Store, scope: str, outbox: list[tuple[str, str]]) -> None:
    """The fewest lines: @idempotent alone (HASH_INPUT, the arguments' digest)."""
    @tool
    @idempotent(store=store, scope=scope)
    def send_email(to: str, subject: str) -> str:
        """Send an email."""
        outbox.append((to, subject))
        return f"m-{len(outbox)}"

    model = script(calls("call_Ab12Cd34Ef56Gh78Ij90Kl12"), calls("call_Zz98Yy76Xx54Ww32Vv10Uu98"),
                   AIMessage(content="ok"))
    out = create_agent(model, [send_email]).invoke({"messages": [("user", "Email Ann")]})
    assert len(outbox) == 1
    assert tool_outputs(out["messages"]) == ["m-1", "m-1"]


def test_without_a_thread_the_call_is_refused_with_what_to_do(
        store: Store, scope: str, outbox: list[tuple[str, str]]) -> None:
    agent = create_agent(script(calls("call_Ab12Cd34Ef56Gh78Ij90Kl12"), AIMessage(content="ok")),
                         [sync_tool(store, scope, outbox)])
    with pytest.raises(InvalidArgument, match="no run id") as e:
        agent.invoke({"messages": [("user", "Email Ann")]})
    assert e.value.hint is not None and "thread_id" in e.value.hint
    assert outbox == []

    def no_config(to: str) -> str:
        return to

    with pytest.raises(InvalidArgument, match="takes no RunnableConfig"):
        idempotent_tool(no_config)
