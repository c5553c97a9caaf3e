"""The OpenAI Agents SDK: Runner's real agent loop, driven by the SDK's own ScriptedModel
(agents.testing), calls a side-effecting @function_tool more than once: a re-planned step,
a retried turn, a run resumed twice from its saved RunState. One email per key."""

from __future__ import annotations

import uuid
import warnings
from dataclasses import dataclass
from typing import Any

import pytest

agents = pytest.importorskip("agents", reason="openai-agents is not installed "
                             "(requirements/frameworks.txt)")

from agents import Agent, RunContextWrapper, Runner, RunState, function_tool  # noqa: E402
from agents.items import ToolCallOutputItem  # noqa: E402
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call  # noqa: E402

from pg_idempotency import AsyncStore, KeyWarning, Store, agent_key, idempotent  # noqa: E402
from pg_idempotency.integrations.openai_agents import idempotent_tool  # noqa: E402

# No trace is exported (there is nowhere to send it here).
agents.set_tracing_disabled(True)

ARGS = {"to": "ann@example.com", "subject": "Your order \u00e9t\u00e9 #42"}


@dataclass
class Job:
    run_id: str


def outputs(result: Any) -> list[Any]:
    """What each tool call answered the model, in order."""
    return [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]


def call(call_id: str, args: dict[str, Any] = ARGS) -> Any:
    return function_call("send_email", args, call_id=call_id)


def email_tool(store: Any, scope: str, outbox: list[tuple[str, str]], **kw: Any) -> Any:
    @function_tool(**kw)
    @idempotent_tool(store=store, scope=scope)
    def send_email(ctx: RunContextWrapper[Job], to: str, subject: str) -> dict[str, str]:
        """Send an email.

        Args:
            to: The recipient's address.
            subject: The subject line.
        """
        outbox.append((to, subject))
        return {"message_id": f"m-{len(outbox)}", "to": to}

    return send_email


def test_the_schema_is_the_one_function_tool_builds_without_the_decorator(store: Store) -> None:
    def send_email(ctx: RunContextWrapper[Job], to: str, subject: str) -> dict[str, str]:
        """Send an email.

        Args:
            to: The recipient's address.
            subject: The subject line.
        """
        return {}

    def plain_send(to: str, subject: str) -> dict[str, str]:
        """Send an email.

        Args:
            to: The recipient's address.
            subject: The subject line.
        """
        return {}

    bare, adapted = function_tool(send_email), function_tool(idempotent_tool(send_email))
    plain, decorated = function_tool(plain_send), function_tool(idempotent(plain_send))
    for a, b in ((bare, adapted), (plain, decorated)):
        assert (a.name, a.description, a.params_json_schema, a.strict_json_schema) == \
            (b.name, b.description, b.params_json_schema, b.strict_json_schema)
    assert adapted.params_json_schema["required"] == ["to", "subject"]  # ctx is not in it
    assert adapted.params_json_schema["properties"]["to"]["description"] == \
        "The recipient's address."


async def test_a_re_planned_step_sends_one_email(store: Store, scope: str) -> None:
    """The model calls the tool, then re-plans and calls it again (a new call id, the
    arguments in another order): the second call replays the first one's result."""
    outbox: list[tuple[str, str]] = []
    model = ScriptedModel([
        [call("call_Ab12Cd34Ef56Gh78Ij90Kl12")],
        [call("call_Zz98Yy76Xx54Ww32Vv10Uu98", {"subject": ARGS["subject"], "to": ARGS["to"]})],
        [assistant_message("Sent.")],
    ])
    agent = Agent(name="mailer", model=model, tools=[email_tool(store, scope, outbox)])
    result = await Runner.run(agent, "Email Ann about her order", context=Job(str(uuid.uuid4())))
    model.assert_complete()
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    first = {"message_id": "m-1", "to": ARGS["to"]}
    assert outputs(result) == [first, first]
    assert result.final_output == "Sent."


async def test_a_retried_turn_sends_one_email(astore: AsyncStore, scope: str) -> None:
    """The turn fails after the tool ran (the model's next request errors); the application
    runs the turn again under the same run id, and the model names the call anew."""
    outbox: list[tuple[str, str]] = []

    def build(steps: list[Any]) -> tuple[Agent[Job], ScriptedModel]:
        @function_tool
        @idempotent_tool(store=astore, scope=scope)
        async def send_email(ctx: RunContextWrapper[Job], to: str, subject: str) -> dict[str, str]:
            """Send an email."""
            outbox.append((to, subject))
            return {"message_id": f"m-{len(outbox)}", "to": to}

        model = ScriptedModel(steps)
        return Agent(name="mailer", model=model, tools=[send_email]), model

    job = Job(str(uuid.uuid4()))
    agent, model = build([[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")],
                          ModelStep.raise_error(RuntimeError("503 from the model's provider"))])
    with pytest.raises(RuntimeError, match="503"):
        await Runner.run(agent, "Email Ann", context=job)
    assert len(outbox) == 1

    agent, model = build([[call("call_Qq11Rr22Ss33Tt44Uu55Vv66")], [assistant_message("Sent.")]])
    result = await Runner.run(agent, "Email Ann", context=job)
    model.assert_complete()
    assert len(outbox) == 1
    assert outputs(result) == [{"message_id": "m-1", "to": ARGS["to"]}]

    # Another run is another key: its email is sent.
    agent, model = build([[call("call_Ww77Xx88Yy99Zz00Aa11Bb22")], [assistant_message("Sent.")]])
    result = await Runner.run(agent, "Email Ann", context=Job(str(uuid.uuid4())))
    assert len(outbox) == 2
    assert outputs(result) == [{"message_id": "m-2", "to": ARGS["to"]}]


async def test_a_run_resumed_twice_from_its_saved_state_sends_one_email(
        store: Store, scope: str) -> None:
    """The run stops for approval and its RunState is saved. The first resumption runs the
    tool, then crashes (the model's next request fails) before anything newer is saved; the
    application resumes again from the saved state, and the tool call is made again."""
    outbox: list[tuple[str, str]] = []
    run = {"run_id": str(uuid.uuid4())}  # a mapping context: RunState serializes it as is

    def agent_with(steps: list[Any]) -> Agent[Any]:
        return Agent(name="mailer", model=ScriptedModel(steps),
                     tools=[email_tool(store, scope, outbox, needs_approval=True)])

    agent = agent_with([[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")]])
    first = await Runner.run(agent, "Email Ann", context=run)
    assert first.interruptions and outbox == []
    saved = first.to_state().to_string()  # what the application stores

    for attempt, steps in enumerate([[ModelStep.raise_error(RuntimeError("crash"))],
                                     [[assistant_message("Sent.")]]]):
        agent = agent_with(steps)
        state = await RunState.from_string(agent, saved)
        for item in state.get_interruptions():
            state.approve(item)
        if attempt == 0:
            with pytest.raises(RuntimeError, match="crash"):
                await Runner.run(agent, state)
        else:
            result = await Runner.run(agent, state)
    assert outbox == [(ARGS["to"], ARGS["subject"])]
    assert outputs(result) == [{"message_id": "m-1", "to": ARGS["to"]}]


async def test_plain_idempotent_under_function_tool_keys_on_the_arguments(
        store: Store, scope: str) -> None:
    """The fewest lines: @idempotent alone (HASH_INPUT, the arguments' digest)."""
    outbox: list[str] = []

    @function_tool
    @idempotent(store=store, scope=scope)
    def send_email(to: str, subject: str) -> str:
        """Send an email."""
        outbox.append(to)
        return f"m-{len(outbox)}"

    model = ScriptedModel([[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")],
                           [call("call_Zz98Yy76Xx54Ww32Vv10Uu98")], [assistant_message("ok")]])
    result = await Runner.run(Agent(name="m", model=model, tools=[send_email]), "Email Ann")
    assert outbox == [ARGS["to"]]
    assert outputs(result) == ["m-1", "m-1"]


async def test_a_key_on_the_tool_call_id_is_warned_about_and_sends_twice(
        store: Store, scope: str) -> None:
    """What the warning is for: keyed on the model's call id, a re-planned step sends again."""
    outbox: list[str] = []

    @function_tool
    @idempotent(store=store, scope=scope, key=lambda i: i["ctx"].tool_call_id)
    def send_email(ctx: RunContextWrapper[Any], to: str, subject: str) -> str:
        """Send an email."""
        outbox.append(to)
        return f"m-{len(outbox)}"

    model = ScriptedModel([[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")],
                           [call("call_Zz98Yy76Xx54Ww32Vv10Uu98")], [assistant_message("ok")]])
    with pytest.warns(KeyWarning, match="looks like an OpenAI tool-call id"):
        await Runner.run(Agent(name="m", model=model, tools=[send_email]), "Email Ann")
    assert len(outbox) == 2


async def test_without_a_run_id_the_call_is_refused_with_what_to_do(
        store: Store, scope: str) -> None:
    from pg_idempotency import InvalidArgument

    outbox: list[tuple[str, str]] = []
    model = ScriptedModel([[call("call_Ab12Cd34Ef56Gh78Ij90Kl12")], [assistant_message("ok")]])
    tool = email_tool(store, scope, outbox, failure_error_function=None)
    with pytest.raises(agents.exceptions.UserError, match="no run id") as e:
        await Runner.run(Agent(name="m", model=model, tools=[tool]), "Email Ann", context=None)
    cause = e.value.__cause__
    assert isinstance(cause, InvalidArgument)
    assert cause.hint is not None and "context=Job(run_id=...)" in cause.hint
    assert outbox == []


def test_the_adapter_names_what_is_missing() -> None:
    from pg_idempotency import InvalidArgument

    def no_context(to: str) -> str:
        return to

    with pytest.raises(InvalidArgument, match="takes no RunContextWrapper"):
        idempotent_tool(no_context)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert agent_key("r", "t", {}) == "r:t:" + "44136fa355b3678a1146ad16f7e8649e" \
            "94fb4fc21fe77e8310c060f61caaff8a"
