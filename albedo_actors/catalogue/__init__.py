"""Pure data every layer shares: the catalogue and what is made of it.

- :mod:`.model`: the :class:`Catalogue` (one server's lists, immutable);
- :mod:`.naming`: advertised names, bounded schemas, the operations a session advertises;
- :mod:`.patterns`: output schemas' patterns, ECMA-262 matched in linear time by RE2 (issue 23);
- :mod:`.saved`: saved catalogues (the store's text, read back as catalogues);
- :mod:`.schemas`: output schemas, a result's ``structuredContent`` checked (issue 16);
- :mod:`.search`: tool search, the BM25 index of a composition's operations (issue 16).
"""

from .model import Catalogue

__all__ = ["Catalogue"]
