"""Write docs/causes.md's list of causes from read/registry.py, the one place each cause is
declared: run it after adding or rewording a cause (tests/test_docs.py fails until the page
matches). The prose around the list is the page's own and is kept.

    .ci-venv/bin/python scripts/causes_doc.py"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "causes.md")


def render(page, lines):
    """The page with its list (the run of `- **` lines) replaced by lines."""
    rows = page.split("\n")
    listed = [i for i, row in enumerate(rows) if row.startswith("- **")]
    if not listed:
        raise SystemExit("%s has no list of causes to replace" % PAGE)
    return "\n".join(rows[:listed[0]] + lines + rows[listed[-1] + 1:])


def main():
    sys.path.insert(0, os.path.join(ROOT, "injector"))
    from earlylog.read import registry
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()
    new = render(page, registry.doc_lines())
    if new != page:
        with open(PAGE, "w", encoding="utf-8") as f:
            f.write(new)
        print("wrote %s" % PAGE)


if __name__ == "__main__":
    main()
