"""`python/cgfast/_cgfast.pyi` describes the extension exactly: the same names, the same
parameters (kinds and defaults), and every function explains itself in `help()`."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

cg = pytest.importorskip("cgfast")
from cgfast import _cgfast  # noqa: E402

PACKAGE = Path(cg.__file__).resolve().parent
STUB = ast.parse((PACKAGE / "_cgfast.pyi").read_text())
KINDS = {
    "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kwonlyargs": inspect.Parameter.KEYWORD_ONLY,
    "posonlyargs": inspect.Parameter.POSITIONAL_ONLY,
}


def stub_names(private: bool = False) -> dict[str, ast.stmt]:
    """The stub's public names (``private``: also the names private to cgfast.capture)."""
    names = {}
    for node in STUB.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return {
        n: node
        for n, node in names.items()
        if not n.startswith("_")
        or n == "__version__"
        or (private and not n.startswith("__") and n[1:2] != "_")
    }


def exported(private: bool = False) -> set[str]:
    return {
        n
        for n in dir(_cgfast)
        if not n.startswith("_") or n == "__version__" or (private and not n.startswith("__"))
    }


def stub_parameters(f: ast.FunctionDef) -> list[tuple[str, inspect._ParameterKind, object]]:
    """(name, kind, default) of each parameter; `inspect.Parameter.empty` without a default."""
    a = f.args
    assert a.vararg is None and a.kwarg is None, f.name
    positional = [*a.posonlyargs, *a.args]
    defaults = [inspect.Parameter.empty] * (len(positional) - len(a.defaults)) + [
        ast.literal_eval(d) for d in a.defaults
    ]
    kinds = [KINDS["posonlyargs"]] * len(a.posonlyargs) + [KINDS["args"]] * len(a.args)
    out = [(p.arg, kind, d) for p, kind, d in zip(positional, kinds, defaults)]
    out += [
        (p.arg, KINDS["kwonlyargs"], inspect.Parameter.empty if d is None else ast.literal_eval(d))
        for p, d in zip(a.kwonlyargs, a.kw_defaults)
    ]
    return out


def test_the_stub_names_exactly_what_the_module_exports():
    assert set(stub_names()) == exported()
    listed = next(
        node.value
        for node in STUB.body
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]
    )
    assert sorted(ast.literal_eval(listed)) == sorted(_cgfast.__all__) == sorted(exported())


def test_the_private_names_are_in_the_stub_and_out_of_all():
    private = exported(private=True) - exported()
    assert private == {"_GraphFunctions", "_graph_node_count", "_resolve_graph_functions", "_walk_graph"}
    assert set(stub_names(private=True)) == exported(private=True)
    assert not private & set(_cgfast.__all__)


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n in exported(private=True)
        if callable(getattr(_cgfast, n)) and not isinstance(getattr(_cgfast, n), type)
    ),
)
def test_each_function_has_the_stubs_parameters_and_a_docstring(name):
    function = getattr(_cgfast, name)
    stub = stub_names(private=True)[name]
    assert isinstance(stub, ast.FunctionDef), name
    real = [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]
    assert real == stub_parameters(stub)
    doc = inspect.getdoc(function)
    assert doc and len(doc.split()) >= 8, f"{name} has no docstring worth the name: {doc!r}"


def test_the_exception_and_the_version():
    stub = stub_names()
    assert isinstance(stub["TraceError"], ast.ClassDef) and [
        ast.unparse(b) for b in stub["TraceError"].bases
    ] == ["ValueError"]
    assert issubclass(_cgfast.TraceError, ValueError) and _cgfast.TraceError.__doc__
    assert ast.unparse(stub["__version__"].annotation) == "str" and isinstance(_cgfast.__version__, str)


def test_the_package_says_it_is_typed():
    assert (PACKAGE / "py.typed").is_file()


def test_help_explains_the_file_and_dict_functions():
    for function in (
        cg.annotate_file,
        cg.annotate_trace,
        cg.move_overlapping_to_stream,
        cg.fix_overlapping_timestamps,
    ):
        text = pydoc_text(function)
        assert function.__name__ in text and " ".join(inspect.getdoc(function).split()[:12]) in " ".join(
            text.split()
        ), text


def pydoc_text(obj) -> str:
    import pydoc

    return pydoc.plain(pydoc.render_doc(obj))
