"""relay-shell: an audited MCP server for shell and SSH operations."""

__version__ = "0.1.0"
