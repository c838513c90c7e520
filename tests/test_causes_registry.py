"""The registry of causes (read/registry.py) holds every kind a report can name: no finder reports
a kind it does not declare, what a cause supersedes makes no circle, and a pair told by one
waiter is not told again by a later one. docs/causes.md is held to it in tests/test_docs.py; a
cause superseded in one thread leaving the others' alone is in tests/test_causes_threads_units.py."""
import glob
import inspect
import os
import re

from earlylog.read import registry
from support import ROOT

READ = os.path.join(ROOT, "injector", "earlylog", "read")


def test_every_kind_a_finder_reports_is_registered_and_every_registered_kind_is_reported_somewhere():
    reported = set()
    for path in glob.glob(os.path.join(READ, "*.py")):
        with open(path, encoding="utf-8") as f:
            reported |= set(re.findall(r"\b[Cc]ause\(\s*\"([a-z0-9-]+)\"", f.read()))
    assert reported == set(registry.KINDS)


def test_each_kind_is_declared_once_with_a_level_a_title_and_its_doc():
    """Its doc is docs/causes.md's line for it (test_docs holds the page to it): one paragraph."""
    declared = [k for f in registry.FINDERS for k in f.causes if isinstance(k, registry.Kind)]
    assert len(declared) == len({k.kind for k in declared})
    for k in declared:
        assert k.level in (registry.THREAD, registry.PROCESS, registry.RUN), k.kind
        assert k.title and k.doc.endswith((".", "?", ")")) and "\n" not in k.doc, k.kind
    for f in registry.FINDERS:  # a kind named by id is declared by an earlier finder
        earlier = {k.kind for g in registry.FINDERS[:registry.FINDERS.index(f)] for k in g.causes
                   if isinstance(k, registry.Kind)}
        assert all(k in earlier for k in f.causes if isinstance(k, str)), f.fn.__name__


def test_the_verdict_tells_each_verdict_line_in_the_registry_s_order_and_what_supersedes_one_exists():
    from earlylog.read import verdict
    assert [kind for kinds, _tell in verdict.STORIES for kind in kinds] == [k.kind for k in registry.LINES]
    # The stories told before how the run ended are LINES' first; what ended it is a cause of the run.
    assert [k.kind for k in registry.LINES[:len(registry.BEFORE_ENDINGS)]] == list(registry.BEFORE_ENDINGS)
    assert all(registry.KINDS[kind].level == registry.RUN for kind in registry.ENDINGS)
    for kind in registry.LINES:
        assert kind.kind not in registry.KINDS and set(kind.supersedes) <= set(registry.KINDS) | set(
            registry.LINE_KINDS), kind.kind
    for k in registry.KINDS.values():
        assert set(k.supersedes) <= set(registry.KINDS) | set(registry.LINE_KINDS) | {registry.ALL}, k.kind


def test_what_one_dump_s_causes_supersede_makes_no_circle():
    mine = {k for f in registry.FINDERS if f.scan in ("process", "stall", "thread") for k in registry.kinds(f)}
    for kind in mine:
        seen, todo = set(), [kind]
        while todo:
            for k in mine:
                if todo[-1] in registry.KINDS[k].supersedes and k not in seen:
                    seen.add(k)
                    todo.append(k)
                    break
            else:
                todo.pop()
        assert kind not in seen, "%s supersedes itself through %s" % (kind, sorted(seen))


def test_a_waiter_that_skips_told_pairs_is_superseded_by_every_kind_found_before_it():
    """A parent and child pair is told once: the finders that consult `told` must see every pair
    found before them, so each kind found earlier (or by the same finder, in an earlier thread)
    supersedes theirs."""
    waiters = [f for f in registry.FINDERS if f.scan == "waiter"]
    for i, f in enumerate(waiters):
        if "in told" not in inspect.getsource(f.fn):
            continue
        mine = set(registry.kinds(f))
        for g in waiters[:i + 1]:
            for k in registry.kinds(g):
                assert mine & set(registry.KINDS[k].supersedes), "%s does not supersede %s" % (k, f.fn.__name__)


def test_each_verdict_pass_yields_only_the_fields_it_declares():
    """verdict.PASSES judge states again as changes, (record, {field: value}); each names the
    fields it may change, and its code yields no other."""
    from earlylog.read import verdict
    for name, run, fields in verdict.PASSES:
        called = re.findall(r"(_\w+)\(", inspect.getsource(run).partition("lambda")[2])
        source = inspect.getsource(getattr(verdict, called[0]))
        changes = re.findall(r"yield \w+, \{(.*?)\}(?:\n|$)", source, re.S)
        assert changes, name
        yielded = {key for change in changes for key in re.findall(r"\"(\w+)\": ", change) if key in
                   ("state", "summary", "idle", "retrying", "waited_by", "killed_by")}
        assert yielded and yielded <= set(fields), (name, yielded, fields)
