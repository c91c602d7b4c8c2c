"""Pure data every layer shares: the catalogue model, advertised names, saved catalogues."""

from .model import Catalogue

__all__ = ["Catalogue"]
