"""The catalog of diagnostic codes (reconciler/diagnostics.py) lists every code rackctl creates,
with the severities and hardware flag it is created with, and the README's table is the catalog's."""

from __future__ import annotations

import ast
import subprocess
import sys
from clihelp import ROOT

from reconciler import diagnostics
from reconciler.diagnostics import CODES, SCOPES, SEVERITIES

PACKAGE = ROOT / "reconciler"
SEVERITY_NAMES = {"ERROR": "error", "WARNING": "warning", "INFO": "info"}


def _calls(name: str):
    """(file, call) for every call of ``name`` in the package."""
    for f in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name:
                yield f.relative_to(ROOT), node


def _severities(node: ast.expr) -> set[str]:
    """The severities an argument can be: a name, or a conditional between names."""
    if isinstance(node, ast.IfExp):
        return _severities(node.body) | _severities(node.orelse)
    assert isinstance(node, ast.Name) and node.id in SEVERITY_NAMES, ast.unparse(node)
    return {SEVERITY_NAMES[node.id]}


def created() -> dict[str, list[tuple[str, set[str], bool]]]:
    """Literal code -> (where, severities, hardware) of each ``Diagnostic(...)`` creating it."""
    out: dict[str, list[tuple[str, set[str], bool]]] = {}
    for f, call in _calls("Diagnostic"):
        code = call.args[1]
        if isinstance(code, ast.Constant):
            hardware = any(k.arg == "hardware" and ast.unparse(k.value) == "True" for k in call.keywords)
            out.setdefault(code.value, []).append((f"{f}:{call.lineno}", _severities(call.args[0]), hardware))
    return out


def test_every_code_created_is_in_the_catalog_as_it_is_created():
    made = created()
    assert len(made) >= 90  # the scan sees the package's diagnostics
    for code, sites in made.items():
        assert code in CODES, f"{sites[0][0]}: code {code!r} is not in reconciler/diagnostics.py's catalog"
        entry = CODES[code]
        for where, severities, hardware in sites:
            assert severities <= set(entry.severities), (where, code, severities, entry.severities)
            assert hardware == entry.hardware, (where, code, "hardware", hardware)


def test_the_codes_made_from_a_word_are_the_catalogs_families():
    # tray-CAUSE: every cause a tray's finding can have (fabric.model.Finding), and the drain causes.
    causes = {call.args[0].value for f, call in _calls("Finding") if isinstance(call.args[0], ast.Constant)}
    assert causes == set(diagnostics.TRAY_CAUSES)
    from reconciler.intent.model import DRAIN_CAUSES
    assert set(DRAIN_CAUSES) <= causes | {"not-reporting", "miscabled"}  # the layout's own, created by name
    # import-plan-KIND: each kind adopt.check reports (through its _change, or by name).
    kinds = {call.args[0].value for f, call in _calls("_change") if f.name == "check.py"}
    named = {c.removeprefix("import-plan-") for c in created() if c.startswith("import-plan-")}
    assert kinds | named == set(diagnostics.IMPORT_PLAN_KINDS)


def test_no_code_in_the_catalog_is_dead():
    source = "\n".join(f.read_text(encoding="utf-8") for f in PACKAGE.rglob("*.py") if f.name != "diagnostics.py")
    families = {f"tray-{c}" for c in diagnostics.TRAY_CAUSES} | {f"import-plan-{k}" for k in diagnostics.IMPORT_PLAN_KINDS}
    for code in set(CODES) - families:
        assert f'"{code}"' in source, f"{code!r} is in the catalog but nothing creates it"


def test_every_entry_is_well_formed():
    for c in CODES.values():
        assert c.severities and set(c.severities) <= set(SEVERITIES), c
        assert list(c.severities) == sorted(c.severities, key=SEVERITIES.index), c  # most severe first
        assert c.scope in SCOPES, c
        assert set(c.targets) <= {"slurm", "kubernetes"}, c
        assert c.help and "\n" not in c.help and "|" not in c.help, c


def test_the_tags_name_what_their_readers_filter():
    assert diagnostics.tagged(diagnostics.STALE) == {"inventory-stale", "inventory-incomplete", "inventory-clock-skew"}
    assert diagnostics.tagged(diagnostics.DESTRUCTIVE) == {"blast-radius"}
    assert diagnostics.tagged(diagnostics.NODE_STATE) == {"node-drain"}
    assert diagnostics.tagged(diagnostics.CREATED_BY_APPLY) == {"config-dir-missing"}


def test_the_readme_table_is_the_catalog():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "diagnostic-codes"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count("\n| `") >= len(CODES)
    for code in CODES:
        assert f"| `{code}` |" in readme
