"""The streamable-HTTP link of one connection (both eras), in four parts.

- :mod:`.link`: :class:`~.link.HttpLink`, the channel's ``Link``: it owns the transport,
  the worker pool, the session id and the listening stream, and closes them.
- :mod:`.exchange`: one request's exchange: its POST (on the caller's thread or a
  worker), the auth rounds, the JSON or SSE answer and its resumption, a refusal; and
  :func:`~.exchange.failure`, the one place an
  :class:`~albedo_actors.transport.http.HttpFailed` becomes an error of ours.
- :mod:`.listen`: the listening stream (GET or ``subscriptions/listen``) and its reopening.
- :mod:`.headers`: the headers of each request, by era.

The blocking HTTP itself (sockets, TLS, pooling, bounded bodies) is
:mod:`albedo_actors.transport.http`. Nothing is imported here, so that a host with only
stdio servers never loads the HTTP code.
"""
