"""Security properties that hold for the code as a whole (issue 8, part 7): YAML is only ever
read with a safe loader, and every template renders with ``StrictUndefined``."""

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
