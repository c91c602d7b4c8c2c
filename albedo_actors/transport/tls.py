"""The one TLS setup of every HTTPS connection albedo makes: the MCP exchange
(:mod:`albedo_actors.transport.http`) and the OAuth requests (:mod:`albedo_actors.auth.http`).

- Trust store: the configured CA file (or directory of hashed certificates), else the
  certifi bundle (the Mozilla store ``requests`` verifies with too; a dependency of ours,
  setup.cfg). Never the environment (``SSL_CERT_FILE``) and never turned off silently.
- Host name: checked (``check_hostname``), against the name the connection was made for;
  the caller wraps with ``server_hostname`` set, which also sends SNI (RFC 6066 3).
- Protocols and ciphers: the standard library's defaults for a client
  (``ssl.create_default_context``: TLS 1.2 at least, no compression).
"""

from __future__ import annotations

import os
import ssl


def client_context(verify: bool | str = True) -> ssl.SSLContext:
    """A client context trusting ``verify``: a CA file or directory, True for the certifi
    bundle, False for nothing checked (only an OAuth endpoint a configuration says so
    for; the MCP exchange never passes False).

    Raises:
        OSError, ssl.SSLError: the CA file or directory cannot be read.
    """
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        if os.path.isdir(verify):
            return ssl.create_default_context(capath=verify)
        return ssl.create_default_context(cafile=verify)
    return ssl.create_default_context(cafile=default_bundle())


def default_bundle() -> str:
    """The certifi bundle's path."""
    import certifi  # first use: a host whose servers are all plain HTTP or stdio never loads it

    return certifi.where()
