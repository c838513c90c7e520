"""Regular expressions compiled on first use, by name: a grammar's writers run in other people's
processes, which must not pay for `re` until a reader parses (records.py, on the start path, keeps
its own and never loads this module)."""


class Patterns:
    """A grammar's patterns {name: source}; calling it with a name gives the compiled pattern."""

    def __init__(self, sources):
        self.sources = sources
        self.compiled = {}

    def __call__(self, name):
        found = self.compiled.get(name)
        if found is None:
            import re
            found = self.compiled[name] = re.compile(self.sources[name])
        return found
