"""The few pieces of the `ast` module that reading a program's source takes (holders.py), on the C
module `_ast` alone: the same node classes and trees. `ast` itself imports collections,
contextlib and enum and builds its unparser: 1.3 MiB of a small process's memory from its first
dump on, against 0.2 MiB for `_ast`. It only parses text it is given: it never reads a file, runs
the program's code or raises anything but SyntaxError and ValueError from parse()."""
import _ast
from _ast import (AST, AsyncFunctionDef, AsyncWith, Attribute, Call, ClassDef, Constant, Expr, FunctionDef, If, Lambda,  # noqa: F401
                  Name, Subscript, With, stmt)


def parse(source, mode="exec"):
    """ast.parse(source, mode=mode)."""
    return compile(source, "<unknown>", mode, _ast.PyCF_ONLY_AST, dont_inherit=True)


def iter_child_nodes(node):
    """ast.iter_child_nodes: the nodes in node's fields, in order."""
    for name in node._fields:
        field = getattr(node, name, None)
        if isinstance(field, AST):
            yield field
        elif isinstance(field, list):
            for item in field:
                if isinstance(item, AST):
                    yield item


def walk(node):
    """ast.walk: node and every node below it, in no given order."""
    todo = [node]
    while todo:
        node = todo.pop()
        todo.extend(iter_child_nodes(node))
        yield node


def increment_lineno(tree, n):
    """ast.increment_lineno: every line number in tree moved n lines down."""
    for node in walk(tree):
        if "lineno" in node._attributes:
            node.lineno = getattr(node, "lineno", 0) + n
        end = getattr(node, "end_lineno", None) if "end_lineno" in node._attributes else None
        if end is not None:
            node.end_lineno = end + n
    return tree


def dump(node):
    """A text that two trees share when they are the same code, wherever it stands (ast.dump's use
    here: is this `X.release()` on the X that was acquired?)."""
    if isinstance(node, AST):
        return "%s(%s)" % (type(node).__name__, ", ".join(dump(getattr(node, f, None)) for f in node._fields))
    if isinstance(node, list):
        return "[%s]" % ", ".join(dump(item) for item in node)
    return repr(node)


def unparse(node):
    """The one-line text of an expression as ast.unparse writes the ones a lock, queue or event
    is named by (`self.lock`, `locks['a']`, `get_lock()`); None for any other, whose source text
    the caller keeps."""
    if isinstance(node, Name):
        return node.id
    if isinstance(node, Constant) and node.value is not Ellipsis:
        return repr(node.value)
    if isinstance(node, Attribute):
        base = unparse(node.value)
        if base is None:
            return None
        # ast.unparse parenthesizes an int's attribute (`(1).real`) only
        return "%s.%s" % ("(%s)" % base if isinstance(node.value, Constant) and type(node.value.value) is int
                          else base, node.attr)
    if isinstance(node, Subscript):
        base, index = unparse(node.value), unparse(node.slice)
        return None if base is None or index is None else "%s[%s]" % (base, index)
    if isinstance(node, Call):
        parts = [unparse(a) for a in node.args]
        for k in node.keywords:
            value = unparse(k.value)
            parts.append(None if k.arg is None or value is None else "%s=%s" % (k.arg, value))
        func = unparse(node.func)
        return None if func is None or None in parts else "%s(%s)" % (func, ", ".join(parts))
    return None
