"""Sphinx configuration of albedo-actors' documentation.

Build it with ``.venv/bin/sphinx-build -W --keep-going -b html docs build/docs`` (Sphinx is
in the ``test`` extra); ``tests/test_docs.py`` builds it the same way and fails on any warning.
"""

project = "albedo-actors"
author = "albedo-actors maintainers"
copyright = "2026, albedo-actors maintainers"

extensions: list[str] = []
root_doc = "index"
exclude_patterns = ["_build"]
# The literal blocks are shell sessions, JSON, Python and error lines side by side:
# none is highlighted, so none can fail to lex.
highlight_language = "none"
html_theme = "alabaster"
html_title = "albedo-actors"
# Wider than alabaster's 940px: the pages hold long command lines and error lines.
html_theme_options = {"page_width": "1180px"}
