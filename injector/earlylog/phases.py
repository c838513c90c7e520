"""The public name of earlylog's phases: `with earlylog.phases.phase("loading shards"): ...`.
The implementation lives in the runtime (runtime/phases.py); this module only gives it its name."""
from earlylog.runtime.phases import phase

__all__ = ["phase"]
