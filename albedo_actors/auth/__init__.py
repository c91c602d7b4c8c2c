"""OAuth sign-in for HTTP MCP servers (spec digest section 7).

``pkce`` and ``discovery`` hold pure functions: no network, no threads.
"""
