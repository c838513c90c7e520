"""The side of earlylog that reads a log folder: files -> records (logread) -> judgement and causes
(verdict, causes) -> views (text, html). It only reads: it never writes into the folder it reads,
and never imports earlylog.cli."""
