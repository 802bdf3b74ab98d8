"""The package's public names, docstrings and type stub (tessel/__init__.pyi) agree."""
import ast
import inspect
import os

import tessel


def stub():
    return ast.parse(open(os.path.join(os.path.dirname(tessel.__file__), "__init__.pyi")).read())


def parameters_of(obj):
    """Parameter names of a Python function, or of a pybind11 function from its docstring's signature line."""
    try:
        return [p for p in inspect.signature(obj).parameters if p != "self"]
    except (TypeError, ValueError):
        first = obj.__doc__.splitlines()[0]
        inner = first[first.index("(") + 1:first.rindex(")")]
        names = [part.split("=")[0].split(":")[0].strip() for part in inner.split(",")]
        return [n for n in names if n and n != "self"]


def test_public_names_are_in_the_stub_and_documented():
    tree = stub()
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    stubbed |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign) for t in [n.target]}
    public = set(tessel.__all__)
    assert public == stubbed, (public ^ stubbed)
    for name in public - {"__version__"}:
        assert getattr(tessel, name).__doc__, name


def test_stub_signatures_match_the_functions_and_methods():
    tree = stub()
    checked = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            expected = [a.arg for a in node.args.args]
            assert parameters_of(getattr(tessel, node.name)) == expected, node.name
            checked += 1
        if isinstance(node, ast.ClassDef) and node.name in ("Model", "Compiled"):
            cls = getattr(tessel, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and not any(
                        isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list):
                    method = getattr(cls, item.name)
                    assert method.__doc__, f"{node.name}.{item.name}"
                    assert parameters_of(method) == [a.arg for a in item.args.args][1:], f"{node.name}.{item.name}"
                    checked += 1
                elif isinstance(item, ast.FunctionDef):
                    assert isinstance(getattr(cls, item.name), property) or hasattr(cls, item.name)
    assert checked >= 14
