"""Wording shared by the parameter rules' messages."""
from __future__ import annotations


def cell_text(path: str) -> str:
    """A cell path as the messages name it: `path`, or the root cell for the empty path."""
    return f"`{path}`" if path else "the root cell"
