"""The version of rehydrate, in one place: the package's metadata reads it from here (hatch)."""

__version__ = "0.1.0"
