"""The import timeline and library marks: phases for slow imports and hang-prone library calls.
It must not change import semantics or what a wrapped function does."""


def start(logger):
    """Placeholder until issue 5 lands."""
