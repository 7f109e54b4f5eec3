"""Security properties that hold for the code as a whole (issue 8, part 7): YAML is only ever
read with a safe loader, XML only through ``text/xmlsource.py`` (defusedxml), and every template
renders with ``StrictUndefined``."""

from __future__ import annotations

import ast
from pathlib import Path

import jinja2
import pytest
import yaml

from reconciler.targets.slurm import imex_scripts as imex, render as slurm, templating
from reconciler.text import yamlsource
from reconciler.views import html as htmlreport

PACKAGE = Path(yamlsource.__file__).resolve().parents[1]  # reconciler/
SOURCES = sorted(PACKAGE.rglob("*.py"))
SAFE_LOADERS = (yaml.SafeLoader, yaml.CSafeLoader, yaml.BaseLoader, yaml.CBaseLoader)
#: PyYAML functions that build arbitrary Python objects, or take the loader from the caller.
UNSAFE_CALLS = {"load", "load_all", "full_load", "full_load_all", "unsafe_load", "unsafe_load_all"}


def _yaml_calls(tree: ast.AST):
    """Every ``yaml.NAME(...)`` call in ``tree``: (function name, call node)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "yaml"):
            yield node.func.attr, node


def test_the_sources_are_all_scanned():
    assert len(SOURCES) > 50
    assert PACKAGE / "text" / "yamlsource.py" in SOURCES


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_reads_yaml_with_an_unsafe_loader(source):
    tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
    unsafe = [f"line {call.lineno}: yaml.{name}" for name, call in _yaml_calls(tree) if name in UNSAFE_CALLS]
    assert unsafe == []
    for node in ast.walk(tree):  # a Loader class of PyYAML's named anywhere
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "yaml":
            assert node.attr not in ("Loader", "FullLoader", "UnsafeLoader", "CLoader", "CFullLoader",
                                     "CUnsafeLoader"), f"line {node.lineno}: yaml.{node.attr}"


#: Modules that parse XML; only xmlsource may import them (it does so through defusedxml).
XML_PARSERS = ("xml.etree", "xml.dom", "xml.sax", "xml.parsers", "lxml", "pyexpat", "defusedxml")


def _xml_imports(tree: ast.AST):
    """Every import of an XML parser in ``tree`` as text (``from M import N`` or ``import M``),
    but ``from xml.etree.ElementTree import Element``: the type alone parses nothing."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (f"import {a.name}" for a in node.names if a.name.startswith(XML_PARSERS))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(XML_PARSERS):
            yield from (f"from {node.module} import {a.name}" for a in node.names
                        if (node.module, a.name) != ("xml.etree.ElementTree", "Element"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_xml_is_parsed_only_by_xmlsource(source):
    found = list(_xml_imports(ast.parse(source.read_text(encoding="utf-8"), str(source))))
    if source == PACKAGE / "text" / "xmlsource.py":
        assert "from defusedxml.ElementTree import DefusedXMLParser" in found
    else:
        assert found == []


def test_an_xml_import_is_seen():
    tree = ast.parse("import xml.etree.ElementTree as ET\nfrom xml.etree.ElementTree import Element, fromstring\n")
    assert list(_xml_imports(tree)) == ["import xml.etree.ElementTree",
                                        "from xml.etree.ElementTree import fromstring"]


def test_the_intent_loaders_are_safe_loaders():
    loaders = [yamlsource._Loader] + ([yamlsource._CLoader] if yamlsource._CLoader is not None else [])
    for loader in loaders:
        assert issubclass(loader, SAFE_LOADERS), loader
    with pytest.raises(Exception) as caught:  # a Python object tag is refused, never built
        yamlsource.load_yaml_text("x: !!python/object/apply:os.system ['true']\n", name="intent.yaml")
    assert "python/object" in str(caught.value)


def _templates(env: jinja2.Environment) -> list[str]:
    names = env.list_templates()
    assert names, env.loader
    return names


@pytest.mark.parametrize("name", _templates(templating.environment()))
def test_every_config_template_refuses_a_missing_value(name):
    # The IMEX scripts are bash, where "{#" occurs: their environment moves the comment tags.
    env = imex._env if name.startswith("imex-") else slurm._env
    assert env.undefined is jinja2.StrictUndefined and not env.autoescape
    with pytest.raises(jinja2.UndefinedError):
        env.get_template(name).render()


def test_the_report_template_refuses_a_missing_value():
    env = htmlreport._environment()
    assert env.undefined is jinja2.StrictUndefined and env.autoescape
    for name in _templates(env):
        with pytest.raises(jinja2.UndefinedError):
            env.get_template(name).render()
