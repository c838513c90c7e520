"""The `earlylog` command: install, uninstall, status, run, env, dump, report, tail.
It runs in its own process (where the hook never logs) and uses earlylog.runtime and
earlylog.read through their public names only."""
