"""runtime/syntax.py: the pieces of `ast` that reading a program's source takes, on `_ast` alone,
give what `ast` gives, on the standard library's own code (pure: no process)."""
import ast
import os
import subprocess
import sys

from earlylog.runtime import syntax

from support import ROOT

STDLIB = os.path.dirname(os.__file__)
FILES = ("threading.py", "queue.py", "logging/__init__.py", "concurrent/futures/thread.py",
         "multiprocessing/pool.py", "asyncio/locks.py", "subprocess.py", "socketserver.py")


def _trees():
    for name in FILES:
        with open(os.path.join(STDLIB, name), encoding="utf-8") as f:
            text = f.read()
        yield name, text, ast.parse(text), syntax.parse(text)


def test_parse_walk_and_line_numbers_match_ast():
    for name, text, theirs, ours in _trees():
        assert ast.dump(theirs, include_attributes=True) == ast.dump(ours, include_attributes=True), name
        assert [type(n).__name__ for n in ast.iter_child_nodes(theirs)] == \
            [type(n).__name__ for n in syntax.iter_child_nodes(ours)]
        assert sorted(ast.dump(n) for n in ast.walk(theirs)) == sorted(ast.dump(n) for n in syntax.walk(ours)), name
        ast.increment_lineno(theirs, 7)
        syntax.increment_lineno(ours, 7)
        assert ast.dump(theirs, include_attributes=True) == ast.dump(ours, include_attributes=True), name


def test_the_expressions_locks_are_named_by_read_as_ast_writes_them():
    """The expressions of `with` items and of calls' receivers (`self._lock` in `self._lock.acquire()`):
    the same text as ast.unparse, or None where the caller keeps the source's; the same identity as
    ast.dump (a release on the lock that was acquired)."""
    exprs, told = [], 0
    for _name, _text, _theirs, ours in _trees():
        for node in syntax.walk(ours):
            if isinstance(node, syntax.With):
                exprs += [item.context_expr for item in node.items]
            elif isinstance(node, syntax.Call) and isinstance(node.func, syntax.Attribute):
                exprs.append(node.func.value)
    for expr in exprs:
        ours = syntax.unparse(expr)
        if ours is not None:
            assert ours == ast.unparse(expr)
            told += 1
    assert told > 0.9 * len(exprs) > 1000
    keys = {}
    for expr in exprs:
        keys.setdefault(ast.dump(expr), set()).add(syntax.dump(expr))
    assert all(len(ours) == 1 for ours in keys.values())
    assert len({next(iter(ours)) for ours in keys.values()}) == len(keys)


def test_a_dump_imports_neither_ast_nor_re():
    """A small program's first dump reads its source without `ast`, `linecache`, `tokenize` or `re`
    (and the enum, functools and collections they bring): over a megabyte of its memory."""
    code = ("import sys, time\nfrom earlylog.runtime import holders\n"
            "frame = sys._getframe()\nholders.calls_at(frame)\n"
            "print(sorted(m for m in ('ast', 'linecache', 'tokenize', 're', 'enum') if m in sys.modules))\n")
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "earlylog-syntax-%d.py" % os.getpid())
    with open(path, "w") as f:
        f.write(code)
    try:
        out = subprocess.run([sys.executable, "-S", path], capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "injector")))
    finally:
        os.unlink(path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_source_file_s_encoding_is_read_as_tokenize_reads_it():
    """fds.getlines decodes a source file by its PEP 263 cookie or BOM without importing tokenize."""
    import codecs
    import io
    import tokenize
    from earlylog.runtime import fds
    samples = [b"x = 1\n", b"# -*- coding: latin-1 -*-\nx = 1\n", b"#!/usr/bin/env python\n# coding=cp1252\nx = 1\n",
               b"\xef\xbb\xbfx = 1\n", b"x = 1\n# coding: latin-1\n", b"# vim: set fileencoding=iso-8859-15 :\n",
               b"\n# coding: koi8-r\n", b"", b"#!python\n\n# coding: latin-1\n"]
    for data in samples:
        expected = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        assert codecs.lookup(fds._encoding(data)).name == codecs.lookup(expected).name, data
