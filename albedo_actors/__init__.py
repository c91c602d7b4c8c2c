"""albedo_actors: a Model Context Protocol client service built from pykka actors."""

__version__ = "0.1.0"
