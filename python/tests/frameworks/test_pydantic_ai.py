"""Pydantic AI: an Agent's real loop, driven by Pydantic AI's own TestModel and
FunctionModel, calls a side-effecting tool more than once: a re-planned step, a run retried
after the model failed, a run retried after its answer was lost. One email per key."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="pydantic-ai-slim is not installed "
                    "(requirements/frameworks.txt)")

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from pg_idempotency import AsyncStore, InvalidArgument, Store, idempotent
from pg_idempotency.integrations.pydantic_ai import idempotent_tool

ARGS = {"to": "ann@example.com", "subject": "Your order \u00e9t\u00e9 #42"}


def mailer(store: Any, scope: str, outbox: list[tuple[str, str]], model: Any) -> Agent[None, str]:
    agent = Agent(model)

    if isinstance(store, AsyncStore):
        @agent.tool
        @idempotent_tool(store=store, scope=scope)
        async def send_email(ctx: RunContext[None], to: str, subject: str) -> dict[str, str]:
            """Send an email.

            Args:
                to: The recipient's address.
                subject: The subject line.
            """
            outbox.append((to, subject))
            return {"message_id": f"m-{len(outbox)}", "to": to}
    else:
        @agent.tool
        @idempotent_tool(store=store, scope=scope)
        def send_email(ctx: RunContext[None], to: str, subject: str) -> dict[str, str]:
            """Send an email.

            Args:
                to: The recipient's address.
                subject: The subject line.
            """
            outbox.append((to, subject))
            return {"message_id": f"m-{len(outbox)}", "to": to}

    return agent


def returns(messages: list[ModelMessage]) -> list[Any]:
    return [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart)]


def scripted(*steps: Any) -> FunctionModel:
    """A FunctionModel that answers its steps in order (an Exception step is raised)."""
    left = list(steps)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = left.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    return FunctionModel(respond)


def call(call_id: str, args: dict[str, Any] = ARGS) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("send_email", args, tool_call_id=call_id)])


def text(s: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(s)])


def test_the_tool_definition_is_the_one_without_the_decorator() -> None:
    def send_email(ctx: RunContext[None], to: str, subject: str) -> str:
        """Send an email.

        Args:
            to: The recipient's address.
            subject: The subject line.
        """
        return ""

    bare, adapted = Agent(TestModel()), Agent(TestModel())
    bare.tool(send_email)
    adapted.tool(idempotent_tool(send_email))
    a = bare._function_toolset.tools["send_email"]
    b = adapted._function_toolset.tools["send_email"]
    assert (a.tool_def.description, a.tool_def.parameters_json_schema, a.takes_ctx) == \
        (b.tool_def.description, b.tool_def.parameters_json_schema, b.takes_ctx)
    assert set(b.tool_def.parameters_json_schema["properties"]) == {"to", "subject"}


async def test_a_re_planned_step_sends_one_email(astore: AsyncStore, scope: str) -> None:
    outbox: list[tuple[str, str]] = []
    model = scripted(call("call_Ab12Cd34Ef56Gh78Ij90Kl12"),
                     call("toolu_01A09q90qw90lq917835lq9", {"subject": ARGS["subject"],
                                                           "to": ARGS["to"]}),
                     text("Sent."))
    result = await mailer(astore, scope, outbox, model).run("Email Ann")
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    first = {"message_id": "m-1", "to": ARGS["to"]}
    assert returns(result.all_messages()) == [first, first]
    assert result.output == "Sent."


async def test_a_run_retried_after_the_model_failed_sends_one_email(
        store: Store, scope: str) -> None:
    outbox: list[tuple[str, str]] = []
    run_id = str(uuid.uuid4())
    failing = scripted(call("call_Ab12Cd34Ef56Gh78Ij90Kl12"), RuntimeError("503 from the model"))
    with pytest.raises(RuntimeError, match="503"):
        await mailer(store, scope, outbox, failing).run("Email Ann", run_id=run_id)
    assert len(outbox) == 1

    retried = scripted(call("call_Qq11Rr22Ss33Tt44Uu55Vv66"), text("Sent."))
    result = await mailer(store, scope, outbox, retried).run("Email Ann", run_id=run_id)
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    assert returns(result.all_messages()) == [{"message_id": "m-1", "to": ARGS["to"]}]


async def test_test_model_runs_retried_with_their_run_id_send_one_email(
        store: Store, scope: str) -> None:
    """TestModel calls every tool once with arguments it generates; the run is retried (its
    answer was lost) under the same run id, then a new run is made."""
    outbox: list[tuple[str, str]] = []
    agent = mailer(store, scope, outbox, TestModel(call_tools=["send_email"]))
    run_id = str(uuid.uuid4())
    first = await agent.run("Email Ann", run_id=run_id)
    again = await agent.run("Email Ann", run_id=run_id)
    assert len(outbox) == 1
    assert returns(first.all_messages()) == returns(again.all_messages()) == \
        [{"message_id": "m-1", "to": outbox[0][0]}]

    other = await agent.run("Email Ann")  # a fresh run id: another key
    assert len(outbox) == 2
    assert returns(other.all_messages()) == [{"message_id": "m-2", "to": outbox[0][0]}]


async def test_plain_idempotent_with_tool_plain_keys_on_the_arguments(
        store: Store, scope: str) -> None:
    """The fewest lines: @idempotent alone (HASH_INPUT, the arguments' digest)."""
    outbox: list[str] = []
    agent = Agent(scripted(call("call_Ab12Cd34Ef56Gh78Ij90Kl12"),
                           call("call_Zz98Yy76Xx54Ww32Vv10Uu98"), text("ok")))

    @agent.tool_plain
    @idempotent(store=store, scope=scope)
    def send_email(to: str, subject: str) -> str:
        """Send an email."""
        outbox.append(to)
        return f"m-{len(outbox)}"

    result = await agent.run("Email Ann")
    assert outbox == [ARGS["to"]]
    assert returns(result.all_messages()) == ["m-1", "m-1"]


def test_the_adapter_names_what_is_missing() -> None:
    def no_context(to: str) -> str:
        return to

    with pytest.raises(InvalidArgument, match="takes no RunContext"):
        idempotent_tool(no_context)
    with pytest.raises(InvalidArgument, match="makes the key itself"):
        idempotent_tool(key=lambda i: "k")
