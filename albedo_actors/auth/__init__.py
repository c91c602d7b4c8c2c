"""OAuth sign-in for HTTP MCP servers (spec digest section 7).

Pure rules, no network and no threads: ``pkce``, ``discovery`` (challenges, metadata
checks, scope choice, ``iss``), ``registration`` and ``tokens`` (requests and bounded
answers), ``record`` (what the store keeps). With I/O: ``addresses`` (which
addresses a server's OAuth requests may reach, resolved and checked), ``http``
(redirect-free requests, each with one total deadline), ``callback`` (the loopback
listener), ``browser`` (a safe opener) and ``signin`` (the whole flow, refreshes and
client credentials). The
``TokenRefresher`` actor and the per-server ``ServerAuth`` an HTTP link uses live in
:mod:`albedo_actors.actors.refresher`.
"""
