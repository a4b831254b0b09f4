"""``msdoctor``: lint network definitions, run the demo, render reports.

Exit codes (the contract): 0 no finding at or above ``--fail-on``; 1 findings;
2 usage error or a target that cannot be loaded (one line on stderr, never a
traceback). MindSpore is imported only by the commands that need it, so
``--help``, ``rules`` and ``lint --no-import`` start fast.
"""
from __future__ import annotations

import argparse
import os
import sys
import tomllib
import traceback
from pathlib import Path
from typing import Any, Sequence

from mindspore_doctor import __version__
from mindspore_doctor._io import REPORT_FILE
from mindspore_doctor.catalog import RULES, resolve_codes
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Report, Severity
from mindspore_doctor.rule_docs import rule_doc

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
FORMATS = ("text", "json", "sarif")
_CLI_ONLY_KEYS = {"fail_on"}


class UsageError(Exception):
    """Bad command line or configuration; the message is one line for the user."""


# --- configuration ------------------------------------------------------------------------


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml in ``start`` or a directory above it."""
    start = start.resolve()
    for folder in [start, *start.parents] if start.is_dir() else start.parents:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def read_tool_config(pyproject: Path | None) -> dict[str, Any]:
    """``[tool.msdoctor]`` with keys normalised to DoctorConfig field names (``fail-on`` -> ``fail_on``)."""
    if pyproject is None:
        return {}
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{pyproject}: cannot read it: {exc}") from None
    table = data.get("tool", {}).get("msdoctor", {})
    if not isinstance(table, dict):
        raise UsageError(f"{pyproject}: [tool.msdoctor] must be a table")
    fields = set(DoctorConfig.__dataclass_fields__) | _CLI_ONLY_KEYS
    out = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in fields:
            raise UsageError(f"{pyproject}: unknown [tool.msdoctor] key {key!r}")
        out[name] = tuple(value) if isinstance(value, list) else value
    return out


def _split_codes(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    return tuple(s.strip() for s in items if str(s).strip())


def build_config(args: argparse.Namespace) -> tuple[DoctorConfig, Severity]:
    """pyproject.toml defaults (nearest above TARGET, else above cwd), overridden by CLI flags."""
    target_path = Path(args.target.partition(":")[0] if ":" in args.target else args.target)
    pyproject = find_pyproject(target_path if target_path.exists() else Path.cwd()) or find_pyproject(Path.cwd())
    options = read_tool_config(pyproject)
    fail_on = options.pop("fail_on", "warning")
    for key in ("select", "ignore"):
        flag = _split_codes(getattr(args, key))
        if flag is not None:
            options[key] = flag
    if args.fail_on:
        fail_on = args.fail_on
    try:
        config = DoctorConfig.from_options(options)
        resolve_codes(config.select)
        resolve_codes(config.ignore)
        threshold = Severity.parse(fail_on)
    except (TypeError, ValueError) as exc:
        where = f" (from {pyproject})" if pyproject else ""
        raise UsageError(f"{exc}{where}") from None
    return config, threshold


# --- lint -----------------------------------------------------------------------------------


def lint_target(args: argparse.Namespace, config: DoctorConfig) -> Report:
    """Lint every target TARGET resolves to; merge into one report whose locations name the target."""
    merged = Report(meta={"targets": []})
    if args.no_import:
        path = Path(args.target)
        if not path.is_file():
            raise UsageError(f"no such file: {path}" if not path.exists() else f"{path} is not a file")
        from mindspore_doctor.runners.lint import lint_source

        try:
            report = lint_source(path, config=config)
        except SyntaxError as exc:
            raise UsageError(f"{exc.filename}:{exc.lineno}: syntax error: {exc.msg}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from None
        merged.meta["targets"].append(str(path))
        merged.extend(report.findings)
        return merged

    from mindspore_doctor.runners.lint import lint
    from mindspore_doctor.static.loader import LoadError, load_targets

    try:
        targets = load_targets(args.target)
    except LoadError as exc:
        raise UsageError(str(exc)) from None
    for target in targets:
        report = lint(target.network, target.loss_fn, target.optimizer, target.sample_inputs, config=config)
        for finding in report.findings:
            finding.location["target"] = target.name
        merged.meta["targets"].append(target.name)
        merged.extend(report.findings)
    return merged


def render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return report.to_json()
    if fmt == "sarif":
        from mindspore_doctor.export.sarif import format_sarif

        return format_sarif(report)
    targets = report.meta.get("targets", [])
    header = f"msdoctor: linted {', '.join(targets)}\n" if targets else ""
    return header + report.to_text()


def cmd_lint(args: argparse.Namespace) -> int:
    config, threshold = build_config(args)
    report = lint_target(args, config)
    text = render(report, args.format)
    if args.output:
        from mindspore_doctor._io import atomic_write_text

        atomic_write_text(args.output, text + "\n")
        print(f"msdoctor: {len(report)} finding(s) written to {args.output}", file=sys.stderr)
    else:
        print(text)
    return EXIT_FINDINGS if report.at_least(threshold) else EXIT_OK


# --- other commands -----------------------------------------------------------------------------


def cmd_rules(args: argparse.Namespace) -> int:
    for r in RULES.values():
        print(f"{r.code}  {r.slug:<30} {r.severity.value:<8} {r.summary}")
    return EXIT_OK


def cmd_rule(args: argparse.Namespace) -> int:
    wanted = args.code.strip()
    entry = RULES.get(wanted.upper()) or next((r for r in RULES.values() if r.slug == wanted), None)
    if entry is None:
        raise UsageError(f"unknown rule {args.code!r}; `msdoctor rules` lists them")
    page = rule_doc(entry.code)
    if page is not None:
        print(page.read_text(encoding="utf-8").rstrip())
    else:
        print(f"{entry.code} [{entry.slug}] ({entry.severity.value}): {entry.summary}")
        print(f"(the full documentation, {entry.doc_path}, is not installed with this package)")
    if entry.options:
        print("\n## Options (`Doctor(name=...)`, `DoctorConfig`, `[tool.msdoctor]`)\n")
        for option in entry.options:
            print(f"- `{option.name}` = {option.default!r}: {option.doc}")
    return EXIT_OK


def _feature(module: str, attr: str, what: str) -> Any:
    """``module.attr`` of an optional part of the package; a clear message when this build lacks it."""
    import importlib

    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise UsageError(f"{what} is not available in this build") from None


def cmd_report(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not (run_dir / REPORT_FILE).is_file():
        raise UsageError(f"{run_dir} has no {REPORT_FILE} (is it the summary_dir of a Doctor run?)")
    if not (args.html or args.tensorboard):
        raise UsageError("nothing to do: give --html OUT and/or --tensorboard")
    if args.html:
        write_run_report = _feature("mindspore_doctor.export.html", "write_run_report", "the HTML report")
        write_run_report(run_dir, Path(args.html))
        print(f"msdoctor: wrote {args.html}", file=sys.stderr)
    if args.tensorboard:
        try:
            events = _feature("mindspore_doctor.export.tensorboard", "convert_run", "the TensorBoard export")(run_dir)
        except ModuleNotFoundError as exc:
            if exc.name != "tensorboardX":
                raise
            raise UsageError("the TensorBoard export needs tensorboardX: pip install tensorboardX") from None
        except FileExistsError as exc:
            raise UsageError(str(exc)) from None
        print(f"msdoctor: wrote {events}", file=sys.stderr)
    return EXIT_OK


# --- argument parsing ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``msdoctor: ...`` line (exit 2), as for every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="msdoctor", description="Tells you what is wrong with a MindSpore training run.")
    parser.add_argument("--version", action="version", version=f"msdoctor {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    lint = sub.add_parser("lint", help="static checks of network definitions (MSD1xx)")
    lint.add_argument("target", metavar="TARGET", help="path/to/file.py, pkg.module or pkg.module:attr")
    lint.add_argument("--no-import", action="store_true", help="parse the source only; execute nothing")
    lint.add_argument("--format", choices=FORMATS, default="text")
    lint.add_argument("--select", metavar="CODES", help="only these codes, prefixes or slugs (comma-separated)")
    lint.add_argument("--ignore", metavar="CODES", help="never these codes, prefixes or slugs (comma-separated)")
    lint.add_argument("--fail-on", choices=[s.value for s in Severity], help="exit 1 at this severity or worse")
    lint.add_argument("--output", metavar="FILE", help="write the report here instead of stdout")
    lint.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    lint.set_defaults(handler=cmd_lint)

    demo = sub.add_parser("demo", help="train a small buggy model with the Doctor and print what it finds")
    from mindspore_doctor.demo import add_demo_arguments, run_demo_command

    add_demo_arguments(demo)
    demo.set_defaults(handler=run_demo_command)

    sanity = sub.add_parser("sanity", help="initial loss, overfit one batch, trivial baseline, lr range test")
    from mindspore_doctor.sanity_checks import add_sanity_arguments, run_sanity_command

    add_sanity_arguments(sanity)
    sanity.set_defaults(handler=run_sanity_command)

    tune = sub.add_parser("tune", help="hyperparameter search guided by the Doctor's diagnosis (Optuna)")
    from mindspore_doctor.tuner.cli import add_tune_arguments, run_tune_command

    add_tune_arguments(tune)
    tune.set_defaults(handler=run_tune_command)

    labels = sub.add_parser("labels", help="label errors of a training set from K-fold out-of-sample scores "
                            "(cleanlab)")
    from mindspore_doctor.runners.labels import add_labels_arguments, run_labels_command

    add_labels_arguments(labels)
    labels.set_defaults(handler=run_labels_command)

    report = sub.add_parser("report", help="render a finished run (its summary_dir)")
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--html", metavar="OUT", help="write an HTML report here")
    report.add_argument("--tensorboard", action="store_true", help="write TensorBoard event files into RUN_DIR from "
                        "its doctor_report.json and doctor_history.json (for runs made before the option existed)")
    report.set_defaults(handler=cmd_report)

    rules = sub.add_parser("rules", help="list every finding code")
    rules.set_defaults(handler=cmd_rules)
    rule = sub.add_parser("rule", help="show the documentation of one code")
    rule.add_argument("code", metavar="CODE")
    rule.set_defaults(handler=cmd_rule)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        if not getattr(args, "handler", None):
            raise UsageError("missing COMMAND (lint, demo, sanity, tune, labels, report, rules, rule); "
                             "see `msdoctor --help`")
        return args.handler(args)
    except UsageError as exc:
        print(f"msdoctor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("msdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `msdoctor rules | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - never a traceback for the user unless asked
        if debug:
            traceback.print_exc()
        print(f"msdoctor: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
