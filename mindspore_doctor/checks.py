"""Running checks safely: one failing or inapplicable check never hides the others.

Every family of checks (static, data, sanity, ...) is a list of ``Check`` run by
``run_checks``: a check that cannot run in this setting raises ``CheckSkipped``
(an MSD002 finding says why); one that raises anything else is a bug of ours
(an MSD001 finding keeps the traceback). The user's run goes on either way.
"""
from __future__ import annotations

import errno
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from mindspore_doctor.catalog import make_finding, resolve_codes
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import CheckSkipped  # noqa: F401 - the checks raise it; defined with the rules that do too

T = TypeVar("T")
OPTIONAL_PACKAGES = {"jinja2": "jinja2", "matplotlib": "matplotlib", "tensorboardX": "tensorboardX"}
"""Modules only some exports need: missing, they skip that export (MSD002 info), not an internal error."""


DISK_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})
"""A write that fails with one of these (full, read-only, forbidden, failing disk) is the machine's state, not a
bug of ours: MSD002, and the files are complete or absent (``_io`` writes atomically)."""


@dataclass(frozen=True)
class Check:
    """A named check: ``run(context) -> findings`` for the catalog ``codes`` it can emit."""

    name: str
    codes: tuple[str, ...]
    run: Callable[[Any], list[Finding]]


def internal_error(name: str, codes: Iterable[str], exc: BaseException, consequence: str = "") -> Finding:
    """The MSD001 finding for a check of ours that raised (call it inside the ``except``)."""
    return make_finding(
        "MSD001",
        f"check `{name}` raised {type(exc).__name__}: {exc}{consequence}",
        location={"check": name},
        evidence={"codes": list(codes), "traceback": traceback.format_exc()},
        suggestion="This is a bug in mindspore_doctor; please report it with the traceback.",
    )


def skipped(name: str, codes: Iterable[str], why: str) -> Finding:
    """The MSD002 finding for a check that cannot run here."""
    codes = list(codes)
    listed = f" ({', '.join(codes)})" if codes else ""
    return make_finding("MSD002", f"check `{name}`{listed} skipped: {why}", location={"check": name},
                        evidence={"codes": codes})


def attempt(name: str, codes: Iterable[str], fn: Callable[[], T], consequence: str = "") -> tuple[T | None, Finding | None]:
    """Run one check: ``(its result, None)``, or ``(None, the finding that says why it did not run)`` — MSD002
    when it raised ``CheckSkipped`` or needs an optional package that is not installed, MSD001 (with
    ``consequence`` appended) when it raised anything else."""
    try:
        return fn(), None
    except CheckSkipped as why:
        return None, skipped(name, codes, str(why))
    except OSError as exc:
        if exc.errno not in DISK_ERRORS:
            return None, internal_error(name, codes, exc, consequence)
        where = f" {exc.filename}" if exc.filename else ""
        return None, skipped(name, codes, f"cannot write{where}: {exc.strerror or exc}{consequence}")
    except ModuleNotFoundError as exc:
        package = OPTIONAL_PACKAGES.get((exc.name or "").partition(".")[0])
        if package is None:
            return None, internal_error(name, codes, exc, consequence)
        return None, skipped(name, codes, f"it needs {package}, which is not installed (pip install {package}).")
    except Exception as exc:  # noqa: BLE001 - a broken check must never break the user's run
        return None, internal_error(name, codes, exc, consequence)


def run_checks(checks: Iterable[Check], ctx: Any, wanted: Callable[[str], bool]) -> list[Finding]:
    """Run each wanted check on ``ctx``; skips become MSD002, exceptions MSD001."""
    found: list[Finding] = []
    for check in checks:
        if any(wanted(c) for c in check.codes):
            result, failure = attempt(check.name, check.codes, lambda: check.run(ctx))
            found.extend(result if failure is None else [failure])
    return found


def selector(config: DoctorConfig) -> Callable[[str], bool]:
    """Predicate: is this code wanted under ``config.select`` / ``config.ignore``?"""
    selected = resolve_codes(config.select) if config.select else None
    ignored = resolve_codes(config.ignore)

    def wanted(code: str) -> bool:
        if code in ("MSD001", "MSD002", "MSD003"):
            return code not in ignored
        return (selected is None or code in selected) and code not in ignored

    return wanted
