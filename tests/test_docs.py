"""The README and docs/ say what the code does: every knob is in the table, every command and
option the README shows exists, every link and section a page or a code comment points to exists."""
import glob
import os
import re
import subprocess

from support import ROOT, clean_env

from earlylog.read import registry
from earlylog.read.registry import KINDS, LINE_KINDS
from earlylog.runtime.config import KNOBS

README = os.path.join(ROOT, "README.md")
PAGES = [README] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))


def text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def earlylog_help(*args):
    out = subprocess.run(["earlylog", *args, "--help"], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def anchors(path):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text(path), re.M)}


def test_readme_knob_table_lists_every_knob_and_no_other():
    rows = set(re.findall(r"^\| `(EARLYLOG\w*)` \|", text(README), re.M))
    assert rows == set(KNOBS)


def test_causes_page_is_the_registry_s_list():
    """docs/causes.md's list is what read/registry.py declares, each kind's title and doc in the
    report's order, then each story the verdict tells as a line (LINES): the page is written from
    the registry by scripts/causes_doc.py, and fails here when one was changed without the other."""
    page = text(os.path.join(ROOT, "docs", "causes.md"))
    listed = [row for row in page.split("\n") if row.startswith("- **")]
    assert listed == registry.doc_lines(), "run scripts/causes_doc.py"
    assert len(KINDS) + len(LINE_KINDS) == len(listed)


def test_every_registered_cause_has_a_scenario_test():
    """Each kind of cause is asserted by name (its `kind` in --json) in a test that runs a real program
    of its kind; a story told as a verdict line is asserted by its words."""
    tests = "".join(text(os.path.join(ROOT, "tests", name)) for name in os.listdir(os.path.join(ROOT, "tests"))
                    if name.startswith("test_") and name.endswith(".py") and name != "test_docs.py")
    untested = [kind for kind in KINDS if '"%s"' % kind not in tests]
    assert untested == [], untested


def test_json_schema_page_names_every_field_of_the_judged_model():
    """`--json` is the judged model's one serializer (read/model.py): every field of each of its
    shapes, a dump's thread and a crash included, is named in docs/json-schema.md's schema."""
    from earlylog.read import logread, model
    page = text(os.path.join(ROOT, "docs", "json-schema.md"))
    schema = re.search(r"^## `--json`\n.*?^```\n(.*?)^```", page, re.M | re.S).group(1)
    shapes = {cls.__name__: cls.__slots__ for cls in vars(model).values()
              if isinstance(cls, type) and issubclass(cls, model.Record) and cls is not model.Record}
    shapes["Thread"] = list(logread.Thread("Thread 0x1 (most recent call first):").json())
    shapes["Crash"] = list(model.Crash("Aborted", None, []).json())
    assert {"Report", "Process", "StallRecord", "Raised", "Memory", "Retrying", "WaitedBy"} <= set(shapes)
    missing = {name: [f for f in fields if '"%s"' % f not in schema] for name, fields in shapes.items()}
    assert not any(missing.values()), missing


def readme_code():
    """The README's code blocks (shell comments dropped) and inline code, one piece a line."""
    readme = text(README)
    blocks = re.findall(r"^```\w*\n(.*?)^```", readme, re.M | re.S)
    lines = [line.split("#")[0] for block in blocks for line in block.splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", readme, flags=re.M | re.S))


def test_readme_commands_and_options_exist():
    commands = set(re.findall(r"^    (\w+)\s", earlylog_help(), re.M))
    shown = [m for piece in readme_code() for m in re.findall(r"\bearlylog ([a-z]+)(.*)", piece)]
    assert commands <= {name for name, _ in shown}, "a command the README never mentions"
    for name, rest in shown:
        assert name in commands, "README shows `earlylog %s`, which does not exist" % name
        options = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", rest))
        usage = earlylog_help(name)
        assert not [o for o in options if o not in usage], "README: `earlylog %s%s`" % (name, rest)


def test_every_link_between_pages_and_every_section_exists():
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(((?!https?:)[^)#]*)(?:#([^)]*))?\)", text(page)):
            path = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
            assert os.path.isfile(path), "%s links to %s, which is missing" % (page, target)
            assert not anchor or anchor in anchors(path), "%s links to %s#%s, no such section" % (page, target, anchor)


def test_code_comments_point_at_sections_that_exist():
    design = os.path.join(ROOT, "docs", "design.md")
    for path in glob.glob(os.path.join(ROOT, "injector", "**", "*.py"), recursive=True):
        for anchor in re.findall(r"docs/design\.md#([\w-]+)", text(path)):
            assert anchor in anchors(design), "%s points at docs/design.md#%s, no such section" % (path, anchor)


def test_readme_fits_a_few_screens():
    assert len(text(README).splitlines()) <= 250


def test_readme_stays_under_15000_characters():
    # A user's README: internals (the layout, how things work) go to docs/.
    assert len(text(README)) < 15000, "README.md is %d characters: move internals to docs/" % len(text(README))
