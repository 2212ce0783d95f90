"""The zoo's common layer: only what two or more models need."""

__version__ = "0.1.0"
