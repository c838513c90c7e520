"""Known errors: exception texts whose usual cause and next step are well known (a missing
`if __name__ == "__main__":` guard, a CPU-only torch asked for CUDA, a port another job holds),
matched on the text a failed process recorded. It only reads text; the verdict appends the step
to that process's line."""
import re

# (pattern on the error's text, the next step); the first that matches is told.
KNOWN = (
    (re.compile(r"An attempt has been made to start a new process before the current process has finished"),
     "with the spawn or forkserver start method every child imports the main script again: put the code that "
     "starts processes (and Pools) under `if __name__ == \"__main__\":`"),
    (re.compile(r"context has already been set"),
     "set_start_method() ran again in a child that imported the main script: call it under "
     "`if __name__ == \"__main__\":`, or use `multiprocessing.get_context(...)` instead"),
    (re.compile(r"Torch not compiled with CUDA enabled"),
     "this torch is a CPU-only build (see the `probe: packages` line): install a CUDA build of torch "
     "(`pip install torch --index-url https://download.pytorch.org/whl/cu124`, matching the driver), "
     "or keep the model on the CPU"),
    (re.compile(r"CUDA out of memory|CUDA error: out of memory"),
     "lower the batch size (or use gradient accumulation, mixed precision, activation checkpointing); "
     "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` helps with fragmentation; check that no other "
     "process holds the GPU (`nvidia-smi`)"),
    (re.compile(r"EADDRINUSE|[Aa]ddress already in use"),
     "another process (a previous run not yet ended, another job) holds that port: pick another "
     "MASTER_PORT, or find it with `ss -ltnp | grep PORT` and stop it"),
    (re.compile(r"Too many open files"),
     "raise the open-files limit (`ulimit -n 65536`), or with torch DataLoader workers "
     "`torch.multiprocessing.set_sharing_strategy(\"file_system\")`"),
    (re.compile(r"No space left on device|unable to (?:write to file|allocate shared memory)|"
                r"insufficient shared memory", re.I),
     "a disk or /dev/shm is full (see the `probe: machine` line): free space; in a container give it a "
     "larger /dev/shm (`--shm-size=8g`) or use fewer DataLoader workers"),
    (re.compile(r"^BrokenPipeError"),
     "the reader of this process's output went away (`| head`, a closed terminal or GUI): nothing is wrong "
     "with the program if that was meant; else keep the reader alive"),
)


def next_step(text):
    """The known next step for an error's text (its newlines as the log writes them, `\\n`), or None."""
    flat = " ".join((text or "").replace("\\n", " ").split())
    for pattern, step in KNOWN:
        if pattern.search(flat):
            return step
    return None
