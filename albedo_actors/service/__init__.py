"""The settings service: the one writer of a running host's settings, over loopback HTTP.

- :mod:`.server`: :class:`~.server.Service` (waitress on 127.0.0.1, ``service.json``)
  and :func:`~.server.read_service_file`; a host embeds the same object that
  ``albedo-mcp serve`` runs.
- :mod:`.host`: :class:`~.host.Host`, what ``albedo-mcp serve`` runs: a Runtime with one
  session and the Service beside it (a save reloads the session).
- :mod:`.app`: the WSGI application (Werkzeug): the JSON API, its security, the page.
- :mod:`.live`: each server's live state from the runtime's session, and its tool list.
  :mod:`.importer`: the import of a pasted configuration.
- :mod:`.signins`: the sign-ins it runs. :mod:`.client`: the command line's client.
- ``static/``: the page (HTML, CSS and plain JavaScript; no build step).

Nothing is imported here: ``import albedo_actors.service.client`` stays cheap for the CLI.
"""
