"""No framework is a dependency: the package and every adapter module import without them;
an adapter needs its framework only when it is used."""

from __future__ import annotations

import subprocess
import sys
import textwrap

FRAMEWORKS = ["agents", "langchain", "langchain_core", "langgraph", "pydantic_ai", "mcp"]


def test_the_package_and_the_adapters_import_without_the_frameworks() -> None:
    code = textwrap.dedent(f"""
        import sys
        for name in {FRAMEWORKS!r}:
            sys.modules[name] = None  # import of it raises ImportError
        import pg_idempotency
        from pg_idempotency.integrations import langchain, mcp, openai_agents, pydantic_ai
        assert not [m for m in sys.modules if m.split(".")[0] in {FRAMEWORKS!r}
                    and sys.modules[m] is not None]
        try:
            openai_agents.idempotent_tool(lambda ctx: None)
        except ImportError:
            print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
