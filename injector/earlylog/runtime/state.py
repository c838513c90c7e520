"""The one holder of this process's earlylog state: its logger and config, and the pid that started.
Every runtime module reads them here; only boot writes them. It must import nothing."""
pid = None      # the pid whose start-up ran: the run-once guard (a venv runs .pth lines twice)
logger = None   # this process's sinks.Logger once its log file and console are open
config = None   # this process's config.Config
# [cwd at start] while the probes are due; the one that pops it runs them (probes.run_now).
probes_due = None
# True from the first start-up on, in this process and every fork child of it (module state is
# copied by fork): wrappers, hooks and at-fork callbacks installed once must not be installed again.
installed = False
