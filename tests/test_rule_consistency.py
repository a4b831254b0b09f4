"""A rule is one definition (``mindspore_doctor.rule.Rule`` in a ``rules/`` module); this test checks that what is
derived from it, and what is written beside it, agree with it (issue 27):

1. the definition itself: a judge, options documented with its code, the catalog (``catalog.RULES``) gathered from it;
2. its page, ``docs/rules/<code>.md``: title, severity, the four sections, the thresholds it names (options of the
   rule, with their defaults);
3. ``DoctorConfig`` (``config.OPTIONS``): the thresholds, each documented with the codes it tunes;
4. the diagnosis knowledge (``mindspore_doctor/diagnosis/knowledge.py``) and the rule registries;
5. the listings: ``msdoctor rules`` and the pages' index, ``docs/rules/README.md``.

Pure reading of files and module tables: no network is built and nothing is trained (MindSpore is not imported).
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

from mindspore_doctor.catalog import RULE_OPTIONS, RULES
from mindspore_doctor.config import OPTIONS, RUN_OPTIONS, DoctorConfig

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mindspore_doctor"
PAGES = ROOT / "docs" / "rules"
INDEX = PAGES / "README.md"
CODES = list(RULES)
FIELDS = {f.name for f in dataclasses.fields(DoctorConfig)}
SECTIONS = ("What it does", "Why it matters", "Example", "How to fix")

CODE = re.compile(r"MSD(\d{3})((?:/(?:MSD)?\d{3})*)")
"""A code, or several in the shorthand ``MSD202/203/204`` (or ``MSD207/MSD210``)."""
CONSUMERS = ("catalog.py", "diagnosis/", "export/", "cli.py")
"""Modules that name codes they read, describe or render, not ones they report: no evidence that a code is emitted."""
EMITTED_ONLY_IN_CATALOG: dict[str, str] = {}
"""Codes no module outside ``CONSUMERS`` names, each with the reason (none today)."""


def codes_in(text: str) -> set[str]:
    """Every code ``text`` names, the shorthand expanded."""
    found = set()
    for m in CODE.finditer(text):
        found.add(f"MSD{m.group(1)}")
        found.update(f"MSD{n}" for n in re.findall(r"\d{3}", m.group(2)))
    return found


@cache
def page(code: str) -> str:
    """The page of ``code``; a test about its contents skips a missing page (the first test reports it)."""
    path = PAGES / f"{code}.md"
    if not path.is_file():
        pytest.skip(f"no {path.relative_to(ROOT)}: test_every_code_has_a_page_with_the_four_sections fails")
    return path.read_text(encoding="utf-8")


def prose(text: str) -> str:
    """``text`` without its fenced code blocks."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def header(text: str) -> str:
    """The page's title and trigger paragraphs, before its first section."""
    return text.split("\n## ", 1)[0]


def config_docstrings() -> dict[str, str]:
    """Field name -> its documentation (``config.OPTIONS``: the run options and every rule's options)."""
    return {name: option.doc for name, option in OPTIONS.items()}


def call_arguments(text: str, name: str) -> list[str]:
    """The argument text of each ``name(...)`` call in ``text``, nested brackets included."""
    found = []
    for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\(", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(text[i], 0)
            i += 1
        found.append(text[m.end():i - 1])
    return found


def keywords(arguments: str) -> set[str]:
    """The keyword names of a call's top-level arguments."""
    flat, depth = [], 0
    for ch in arguments:
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        flat.append(ch if depth == 0 or ch in "([{" else " ")
    return set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*=(?!=)", "".join(flat)))


def named_options(code: str) -> dict[str, str]:
    """DoctorConfig options the page of ``code`` names, each with where: ``name`` -> how it was named."""
    text = page(code)
    named: dict[str, str] = {}
    for m in re.finditer(r"`([A-Za-z_]\w*)`\s*=", prose(text)):  # `update_ratio_max`=0.1, `rank_atol` = 1e-7
        named.setdefault(m.group(1), f"`{m.group(1)}`=...")
    for line in re.findall(r"^Options:.*$", text, flags=re.M):  # Options: `outlier_z`, `outlier_gap` (DoctorConfig)
        for name in re.findall(r"`([A-Za-z_]\w*)`", line):
            named.setdefault(name, "an Options: line")
    for sentence in re.split(r"(?<=\.)\s+", prose(text).replace("\n", " ")):  # `max_drop_rate = 0.8` in [tool.msdoctor]
        if "[tool.msdoctor]" in sentence:
            for name in re.findall(r"`([A-Za-z_]\w*)\s*=[^`]*`", sentence):
                named.setdefault(name, "a [tool.msdoctor] key")
    for call in ("Doctor", "DoctorConfig"):
        for arguments in call_arguments(text, call):
            for name in keywords(arguments):
                named.setdefault(name, f"{call}({name}=...)")
    from mindspore_doctor.runners.check_data import check_data
    from mindspore_doctor.runners.lint import lint

    for function in (lint, check_data):  # their own parameters are not options: lint(net, loss_fn=..., x=...)
        own = set(inspect.signature(function).parameters)
        for arguments in call_arguments(text, function.__name__):
            for name in keywords(arguments) - own:
                named.setdefault(name, f"{function.__name__}(..., {name}=...)")
    return named


# --- 1. the definitions ---------------------------------------------------------------------------


def test_the_catalog_is_the_definitions_of_the_rule_modules():
    from mindspore_doctor.catalog import FAMILIES
    from mindspore_doctor.rule import DOCTOR_RULES

    defined = [r for r in DOCTOR_RULES] + [r for family in FAMILIES for r in family.RULES]
    codes = [r.code for r in defined]
    assert sorted(set(codes)) == sorted(codes), f"codes defined twice: {sorted({c for c in codes if codes.count(c) > 1})}"
    assert all(RULES[r.code] is r for r in defined) and len(RULES) == len(defined)
    assert CODES == sorted(CODES), "the catalog lists the codes in order"


@pytest.mark.parametrize("code", CODES)
def test_every_rule_reads_options_documented_with_its_code(code):
    """A rule's options name its code in their documentation, and every option documented with a code is read by
    that code's rule: the rule's ``options`` are the thresholds a user can turn for it."""
    rule = RULES[code]
    undocumented = [o.name for o in rule.options if code not in codes_in(o.doc)]
    assert not undocumented, f"{code} reads {undocumented}, whose documentation does not name {code}"
    listed = {o.name for o in rule.options}
    unlisted = sorted(name for name, option in RULE_OPTIONS.items() if code in codes_in(option.doc)
                      and name not in listed)
    assert not unlisted, f"options documented as tuning {code} that its Rule does not list: {unlisted}"


def test_the_config_stub_is_current():
    """``mindspore_doctor/config.pyi`` (the fields for type checkers and editors) is what ``scripts/config_stub.py``
    writes from the options now: rerun it after adding or changing an option."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("config_stub", ROOT / "scripts" / "config_stub.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    stub = PACKAGE / "config.pyi"
    assert stub.read_text(encoding="utf-8") == generator.stub_text(), "stale: run python scripts/config_stub.py"
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    stubbed = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DoctorConfig")
    assert [n.target.id for n in stubbed.body if isinstance(n, ast.AnnAssign)] == list(OPTIONS)


def test_run_options_and_rule_options_are_the_config_fields():
    assert FIELDS == set(OPTIONS) == set(RULE_OPTIONS) | {o.name for o in RUN_OPTIONS}
    assert not set(RULE_OPTIONS) & {o.name for o in RUN_OPTIONS}
    defaults = DoctorConfig()
    assert all(getattr(defaults, name) == option.default for name, option in OPTIONS.items())


# --- 2. the pages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("code", CODES)
def test_every_code_has_a_page_with_the_four_sections(code):
    path = PAGES / f"{code}.md"
    assert path.is_file(), f"{code} is in the catalog but has no page {path.relative_to(ROOT)}"
    sections = re.findall(r"^## (.+?)\s*$", path.read_text(encoding="utf-8"), flags=re.M)
    missing = [s for s in SECTIONS if s not in sections]
    assert not missing, f"docs/rules/{code}.md lacks the section(s) {missing}"
    order = [sections.index(s) for s in SECTIONS]
    assert order == sorted(order), f"docs/rules/{code}.md: the sections are not in the order {SECTIONS}"


def test_every_page_is_a_catalog_code():
    pages = {p.stem for p in PAGES.glob("*.md")} - {INDEX.stem}
    unknown = sorted(pages - set(RULES))
    assert not unknown, f"pages for codes the catalog does not have: {[f'docs/rules/{c}.md' for c in unknown]}"


@pytest.mark.parametrize("code", CODES)
def test_page_title_and_severity_agree_with_the_catalog(code):
    entry = RULES[code]
    title = page(code).splitlines()[0]
    m = re.fullmatch(r"# (MSD\d{3})(?: —)? (\S+)\s*", title)
    assert m, f"docs/rules/{code}.md: title {title!r} is not '# {code} {entry.slug}' (or '# {code} — {entry.slug}')"
    assert m.groups() == (code, entry.slug), (
        f"docs/rules/{code}.md: title {title!r} names {m.group(1)} {m.group(2)}, the catalog {code} {entry.slug}")
    severity = re.search(r"^\**Severity:?\**:?(.*?)(?:\n\n|\Z)", header(page(code)), flags=re.M | re.S)
    if severity:  # a page that states a severity states the catalog's default among its cases
        assert entry.severity.value in severity.group(1), (
            f"docs/rules/{code}.md: the severity line {severity.group(1).strip()[:80]!r} does not mention the "
            f"catalog's default severity, {entry.severity.value}")


# --- 3. the thresholds ----------------------------------------------------------------------------


@pytest.mark.parametrize("code", CODES)
def test_options_a_page_names_are_its_rules_options(code):
    """A page names the options of its own rule (``Rule.options``) or of the run (``RUN_OPTIONS``), never one that
    does not exist or that tunes another rule."""
    unknown = {name: how for name, how in named_options(code).items() if name not in FIELDS}
    assert not unknown, f"docs/rules/{code}.md names options that DoctorConfig lacks: {unknown}"
    own = {o.name for o in RULES[code].options} | {o.name for o in RUN_OPTIONS}
    foreign = {name: how for name, how in named_options(code).items() if name not in own}
    assert not foreign, f"docs/rules/{code}.md names options that {code}'s Rule does not read: {foreign}"


@pytest.mark.parametrize("code", CODES)
def test_default_trigger_matches_the_config(code):
    """The thresholds the page's trigger paragraph states (`name` = value) are DoctorConfig's defaults, and each
    field's docstring names this code."""
    defaults, docstrings = DoctorConfig(), config_docstrings()
    for m in re.finditer(r"`([A-Za-z_]\w*)`\s*=\s*(\[[^\]]*\]|[-+0-9.eE]*[0-9])", header(page(code))):
        name, stated = m.groups()
        assert name in FIELDS, f"docs/rules/{code}.md: the trigger names `{name}`, which DoctorConfig lacks"
        default = getattr(defaults, name)
        if stated.startswith("["):
            value: object = tuple(float(v) for v in stated[1:-1].split(","))
            default = tuple(float(v) for v in default)
        else:
            value, default = float(stated), float(default)
        assert value == default, (
            f"docs/rules/{code}.md: the trigger says `{name}` = {stated}, DoctorConfig's default is {default}")
        assert code in codes_in(docstrings.get(name, "")), (
            f"DoctorConfig.{name} tunes {code} (docs/rules/{code}.md) but its docstring does not name {code}: "
            f"{docstrings.get(name, '(none)')[:80]!r}")


def test_config_docstrings_name_known_codes():
    docstrings = config_docstrings()
    assert set(docstrings) == FIELDS, f"DoctorConfig fields without a docstring: {sorted(FIELDS - set(docstrings))}"
    unknown = {name: sorted(codes_in(doc) - set(RULES)) for name, doc in docstrings.items()
               if codes_in(doc) - set(RULES)}
    assert not unknown, f"DoctorConfig docstrings name codes the catalog lacks: {unknown}"


# --- 4. the diagnosis knowledge and the registries -----------------------------------------------


def test_knowledge_names_known_codes():
    from mindspore_doctor.diagnosis.engine import PREDICATES
    from mindspore_doctor.diagnosis.knowledge import CAUSES

    problems = []
    for cause in CAUSES:
        for symptom in cause.symptoms:
            if symptom.code not in RULES:
                problems.append(f"cause {cause.id!r}: symptom {symptom.code} is not in the catalog")
            if symptom.predicate is not None and symptom.predicate not in PREDICATES:
                problems.append(f"cause {cause.id!r}: symptom {symptom.code} uses the unknown predicate "
                                f"{symptom.predicate!r}")
        for part, text in (("title", cause.title), ("explanation", cause.explanation),
                           *(("remedy", r) for r in cause.remedies)):
            problems += [f"cause {cause.id!r}: its {part} names {c}, not in the catalog"
                         for c in sorted(codes_in(text) - set(RULES))]
    ids = [c.id for c in CAUSES]
    problems += [f"cause id {i!r} used twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    assert not problems, "diagnosis/knowledge.py:\n" + "\n".join(problems)


def registries() -> dict[str, set[str]]:
    """Each registry of rules (or of the codes a part of the package reports or reads) -> the codes it names."""
    from mindspore_doctor.diagnosis import engine
    from mindspore_doctor.rules import adversarial, data, training, tuning
    from mindspore_doctor.runners import check_data, lint

    found = {
        "rules.training.TRAINING_RULES": {c for codes, _ in training.TRAINING_RULES for c in codes},
        "rules.training.CURRENT_RULES": set(training.CURRENT_RULES),
        "rules.training.PROBE_CODES": set(training.PROBE_CODES),
        "rules.training.PARAMETER_PROBE_CODES": set(training.PARAMETER_PROBE_CODES),
        "rules.training.ACTIVATION_PROBE_CODES": set(training.ACTIVATION_PROBE_CODES),
        "rules.training.probes_needed()": set(training.probes_needed(DoctorConfig())),
        "rules.adversarial.ADVERSARIAL_RULES": {c for codes, _ in adversarial.ADVERSARIAL_RULES for c in codes},
        "rules.data.JUDGES": {rule.code for rule, _ in data.JUDGES},
        "runners.check_data.DATA_CODES": set(check_data.DATA_CODES),
        "runners.check_data.PAIR_CODES": set(check_data.PAIR_CODES),
        "runners.lint.CHECKS": {c for check in lint.CHECKS for c in check.codes},
        "runners.lint.SOURCE_CHECKS": {c for check in lint.SOURCE_CHECKS for c in check.codes},
        "diagnosis.engine.NOT_SYMPTOMS": set(engine.NOT_SYMPTOMS),
    }
    for name, value in vars(tuning).items():  # the code sets tune's judgement reads: LR_TOO_HIGH, FATAL, ...
        if isinstance(value, frozenset) and all(isinstance(v, str) and CODE.fullmatch(v) for v in value):
            found[f"rules.tuning.{name}"] = set(value)
    return found


def test_registries_name_known_codes():
    tables = registries()
    problems = [f"{name} names {sorted(codes - set(RULES))}, not in the catalog"
                for name, codes in tables.items() if codes - set(RULES)]
    probe = tables["rules.training.PROBE_CODES"]
    for name in ("rules.training.PARAMETER_PROBE_CODES", "rules.training.ACTIVATION_PROBE_CODES",
                 "rules.training.probes_needed()"):
        if tables[name] - probe:
            problems.append(f"{name} names {sorted(tables[name] - probe)}, not among PROBE_CODES")
    judged = tables["rules.training.TRAINING_RULES"]
    for name in ("rules.training.PROBE_CODES", "rules.training.CURRENT_RULES"):
        if tables[name] - judged:
            problems.append(f"{name} names {sorted(tables[name] - judged)}, which no TRAINING_RULES entry judges")
    if tables["runners.check_data.PAIR_CODES"] - tables["rules.data.JUDGES"]:
        problems.append("runners.check_data.PAIR_CODES names codes rules.data.JUDGES does not judge")
    assert not problems, "\n".join(problems)


def test_every_code_named_in_the_package_and_the_docs_exists():
    """A code in any module, docstring, comment, doc page or the README is one the catalog has."""
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "docs").rglob("*.md"), ROOT / "README.md",
             *(PACKAGE / "export" / "templates").rglob("*")]
    problems = []
    for path in files:
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            problems += [f"{path.relative_to(ROOT)}:{number}: {code}"
                         for code in sorted(codes_in(line) - set(RULES))]
    assert not problems, "codes the catalog does not have:\n" + "\n".join(problems)


# --- 5. every code is reported somewhere ---------------------------------------------------------


@cache
def code_literals() -> dict[str, set[str]]:
    """Code -> the modules (outside ``CONSUMERS``) with that exact string literal: a rule or a check that reports it."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith(CONSUMERS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in RULES:
                found.setdefault(node.value, set()).add(module)
    return found


@pytest.mark.parametrize("code", CODES)
def test_every_code_is_reported_outside_the_catalog(code):
    if code in EMITTED_ONLY_IN_CATALOG:
        pytest.skip(EMITTED_ONLY_IN_CATALOG[code])
    assert code_literals().get(code), (
        f"{code} is in the catalog but no module outside {CONSUMERS} names it: nothing reports it "
        "(or add it to EMITTED_ONLY_IN_CATALOG with the reason)")


def test_the_allowlist_of_unreported_codes_is_current():
    stale = sorted(c for c in EMITTED_ONLY_IN_CATALOG if c not in RULES or code_literals().get(c))
    assert not stale, f"EMITTED_ONLY_IN_CATALOG lists codes that are unknown or reported after all: {stale}"


# --- 6. the listings -----------------------------------------------------------------------------


def test_msdoctor_rules_lists_every_code(capsys):
    from mindspore_doctor.cli import main

    assert main(["rules"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert list(lines) == CODES, (
        f"`msdoctor rules` misses {sorted(set(CODES) - set(lines))}, adds {sorted(set(lines) - set(CODES))}, "
        "or lists them out of the catalog's order")
    wrong = [code for code, line in lines.items()
             if line.split()[1:3] != [RULES[code].slug, RULES[code].severity.value]]
    assert not wrong, f"`msdoctor rules` shows another slug or severity for {wrong}"


def test_the_rules_index_lists_every_code():
    """docs/rules/README.md: one row per code, linking its page, with the catalog's slug and severity."""
    row = re.compile(r"^\| \[(MSD\d{3})\]\((MSD\d{3})\.md\) \| ([^|]+?) \| ([^|]+?) \|", flags=re.M)
    rows = row.findall(INDEX.read_text(encoding="utf-8"))
    listed = [code for code, *_ in rows]
    assert sorted(set(listed)) == listed and set(listed) == set(RULES), (
        f"{INDEX.relative_to(ROOT)}: missing {sorted(set(RULES) - set(listed))}, "
        f"unknown {sorted(set(listed) - set(RULES))}, repeated {sorted({c for c in listed if listed.count(c) > 1})}")
    wrong = [f"{code}: links {target}.md, says {slug} {severity}" for code, target, slug, severity in rows
             if (target, slug, severity) != (code, RULES[code].slug, RULES[code].severity.value)]
    assert not wrong, f"{INDEX.relative_to(ROOT)} disagrees with the catalog: {wrong}"
