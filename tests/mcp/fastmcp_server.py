"""A small MCP server for Ferry's MCP client tests, built on the Python SDK (`mcp`, pinned in
requirements.txt; tests/mcp/setup installs it). FastMCP is called `MCPServer` since mcp 2.

    python fastmcp_server.py                 # stdio
    python fastmcp_server.py --http PORT     # streamable HTTP on http://127.0.0.1:PORT/mcp

With `--http 0` the OS picks the port; uvicorn's "Uvicorn running on http://127.0.0.1:N" line
on stderr says which.

Each tool exists to provoke one client behaviour: `slow` a timeout, `fail` an isError result,
`crash` a dead server (and `pid` proves the restart), `image` and `resource_link` the non-text
content types, `enable_extra` a `notifications/tools/list_changed`, `header` shows which HTTP
headers arrived.
"""

import argparse
import base64
import os
import time

from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ResourceLink
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

# A 1x1 RGB PNG (one green pixel).
TINY_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)

server = MCPServer("ferry-test-server", version="1.0.0")

# MCPServer advertises `tools.listChanged` only when asked, and has no public knob for it.
_lowlevel = server._lowlevel_server
_default_options = _lowlevel.create_initialization_options
_lowlevel.create_initialization_options = lambda *args, **kwargs: _default_options(
    NotificationOptions(tools_changed=True)
)


@server.tool()
def echo(text: str) -> str:
    """Returns the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
async def slow(seconds: float) -> str:
    """Sleeps for the given number of seconds, then answers."""
    import anyio

    await anyio.sleep(seconds)
    return f"slept {seconds}s"


@server.tool()
def fail() -> str:
    """Always fails: the result has isError set."""
    raise ToolError("fail was called")


@server.tool()
def crash() -> str:
    """Ends the server process at once with exit code 3, without answering."""
    os._exit(3)


@server.tool()
def image() -> Image:
    """Returns a 1x1 PNG."""
    return Image(data=TINY_PNG, format="png")


@server.tool()
def resource_link() -> ResourceLink:
    """Returns a link to a resource instead of its content."""
    return ResourceLink(
        name="readme", uri="file:///ferry/README.md", mime_type="text/markdown"
    )


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header ("" when absent, and always on stdio)."""
    return (ctx.headers or {}).get(name.lower(), "")


def extra() -> str:
    """Registered by enable_extra."""
    return "extra"


@server.tool()
async def enable_extra(ctx: Context) -> str:
    """Registers the tool `extra` and tells the client the tool list changed."""
    server.add_tool(extra)
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await ctx.notify_tools_changed()  # delivered on subscriptions/listen streams
    else:
        await ctx.session.send_tool_list_changed()
    return "extra enabled"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    parser.add_argument(
        "--start-delay", type=float, default=0, metavar="SECONDS", help="wait this long before serving (a slow start)"
    )
    args = parser.parse_args()
    time.sleep(args.start_delay)
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
