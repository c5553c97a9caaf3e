"""Adapters for agent frameworks, each importing its framework only when it is imported:
none of them is a dependency of the package (install the extra: `pg-idempotency[langgraph]`).

- `openai_agents`: the OpenAI Agents SDK's `@function_tool`
- `langchain`: LangChain's `@tool`, in LangGraph's ToolNode and the prebuilt agents
- `pydantic_ai`: Pydantic AI's `@agent.tool`
- `mcp`: a tool of an MCP server written with the MCP SDK (`MCPServer`, formerly FastMCP)
"""
