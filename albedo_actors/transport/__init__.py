"""Blocking I/O: the stdio launcher and pipe reader. Reports through callbacks."""
