"""The floor: a bare MCPServer with no audit, no policy, no capture class. Same SDK, same transport.

Tools: `noop` does no work (one MCP round trip and nothing else); `sh_true` spawns `/bin/sh -c true`;
`stream_hash` runs a command and streams its output through hashlib SHA-256 keeping a head and a tail, the
minimum any bounded, digesting executor must do.
"""

from __future__ import annotations

import asyncio
import hashlib

from mcp.server.mcpserver import MCPServer

mcp = MCPServer(name="bare", log_level="WARNING")
KEEP = 32768


@mcp.tool()
async def noop() -> str:
    return "ok"


@mcp.tool()
async def sh_true() -> str:
    process = await asyncio.create_subprocess_exec("/bin/sh", "-c", "true")
    return str(await process.wait())


@mcp.tool()
async def stream_hash(command: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, stdout=asyncio.subprocess.PIPE, limit=1024 * 1024
    )
    assert process.stdout is not None
    digest = hashlib.sha256()
    head = bytearray()
    tail = bytearray()
    total = 0
    while chunk := await process.stdout.read(1024 * 1024):
        digest.update(chunk)
        total += len(chunk)
        if len(head) < KEEP:
            head += chunk[: KEEP - len(head)]
        tail += chunk[-KEEP:]
        if len(tail) > 2 * KEEP:
            del tail[:-KEEP]
    await process.wait()
    return f"{total} {digest.hexdigest()} {len(head)} {len(tail[-KEEP:])}"


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--http":  # the HTTP floor: the SDK's streamable HTTP transport
        mcp.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run("stdio")
