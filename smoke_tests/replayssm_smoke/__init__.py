"""Smoke suite: acceptance and exactness of a live SGLang server (see smoke_tests/README.md)."""

__version__ = "0.1.0"
