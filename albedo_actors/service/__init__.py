"""The settings service: the one writer of a running host's settings, over loopback HTTP.

- :mod:`.server`: :class:`~.server.Service` (waitress on 127.0.0.1, ``service.json``)
  and :func:`~.server.read_service_file`; a host embeds the same object that
  ``albedo-mcp serve`` runs.
- :mod:`.app`: the WSGI application (Werkzeug): the JSON API, its security, the page.
- :mod:`.signins`: the sign-ins it runs. :mod:`.client`: the command line's client.
- ``static/``: the page (HTML, CSS and plain JavaScript; no build step).

Nothing is imported here: ``import albedo_actors.service.client`` stays cheap for the CLI.
"""
