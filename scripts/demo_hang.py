"""A training script that hangs silently: it prints "starting job..." and then waits forever
on a lock that a background "prefetch" thread took and never released. No output, 0% CPU."""
import threading
import time

_cache_lock = threading.Lock()


def prefetch_shards():
    _cache_lock.acquire()  # the bug: never released when the shard list is empty
    time.sleep(3600)


def load_dataset():
    with _cache_lock:
        return list(range(10))


def main():
    print("starting job...")
    threading.Thread(target=prefetch_shards, name="prefetch", daemon=True).start()
    time.sleep(0.2)
    data = load_dataset()
    print("training on", len(data), "samples")


if __name__ == "__main__":
    main()
