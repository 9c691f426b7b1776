"""The toolkit's version, recorded in every run row (a module of its own so the layers that
write runs need not import the package's face, which sits above them)."""

__version__ = "0.1.0"
