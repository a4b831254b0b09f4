"""The rule pages (``docs/rules/MSDnnn.md``, one per finding code), wherever this installation keeps them.

A built package ships them as package data at the same relative path, ``mindspore_doctor/docs/rules`` (setup.py
copies them there); an editable install has none there and reads the checkout's ``docs/rules``. ``msdoctor rule``,
the HTML report's links and SARIF's ``helpUri`` all look here, so they name the same page.
"""
from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

DOCS_FOLDER = PurePosixPath("docs", "rules")
"""The pages' folder: relative to the repository's root, and to the installed package."""
_CHECKOUT_ROOT = Path(__file__).resolve().parent.parent


def rule_doc(code: str) -> Traversable | None:
    """The page of ``code``: the installed package's copy first, else the checkout's; None when neither has it."""
    for root in (resources.files(__package__), _CHECKOUT_ROOT):
        page = root.joinpath(*DOCS_FOLDER.parts, f"{code}.md")
        if page.is_file():
            return page
    return None


def rule_doc_uri(code: str) -> str:
    """Where a report links the page of ``code``: a ``file://`` URI of the page on this machine, or, when this
    installation has no page on disk, its path in the project's repository."""
    page = rule_doc(code)
    return page.as_uri() if isinstance(page, Path) else str(DOCS_FOLDER / f"{code}.md")
