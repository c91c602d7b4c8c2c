"""OAuth sign-in for HTTP MCP servers (spec digest section 7).

Pure rules, no network and no threads: ``pkce``, ``discovery`` (challenges, metadata
checks, scope choice, ``iss``), ``registration`` and ``tokens`` (requests and bounded
answers), ``record`` (what the store keeps), ``dpop`` (RFC 9449: a server's ES256
key, its proofs and the nonces per origin). With I/O: ``addresses`` (which
addresses a server's OAuth requests may reach, resolved and checked), ``http``
(redirect-free requests, each with one total deadline), ``callback`` (the loopback
listener), ``browser`` (a safe opener), ``signin`` (the whole flow, refreshes and
client credentials), ``grants`` (the grants with no browser: workload identity's
jwt-bearer and enterprise-managed authorization's token exchange), ``refresh`` (a token refresh under the row's lease) and
``server_auth`` (the per-server ``ServerAuth`` an HTTP link uses, through the
``LinkAuth`` Protocol that :mod:`albedo_actors.connection.http.exchange` declares) and
``flow`` (the 401/403/DPoP-nonce rounds of one request, a generator the link drives). Each
module that uses the store declares the Protocol of what it calls (``CredentialStore``,
``RefreshStore``, ``SignInStore``). The ``TokenRefresher`` actor lives in
:mod:`albedo_actors.actors.refresher`.
"""
