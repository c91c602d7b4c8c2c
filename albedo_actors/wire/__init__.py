"""Pure protocol code: JSON-RPC messages, stdio framing, MCP rules of both eras."""
