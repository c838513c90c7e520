"""The one holder of this process's earlylog state: its logger and config, and the pid that started.
Every runtime module reads them here; only boot writes them. It must import nothing."""
# Not state but a rule every module that makes a descriptor shares (sinks at start-up, fds after):
# ours sit at this number and up, far above the low numbers a program's open() gets, so a program
# that closes every fd, or a stale one, never takes ours (docs/design.md#our-fds-sit-high).
HIGH_FD = 512
pid = None      # the pid whose start-up ran: the run-once guard (a venv runs .pth lines twice)
logger = None   # this process's sinks.Logger once its log file and console are open
config = None   # this process's config.Config
# [cwd at start] while the probes are due; the one that pops it runs them (probes.run_now).
probes_due = None
# True from the first start-up on, in this process and every fork child of it (module state is
# copied by fork): wrappers, hooks and at-fork callbacks installed once must not be installed again.
installed = False
