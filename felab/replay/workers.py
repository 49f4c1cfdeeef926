"""Worker threads for the real-time replay, which Ctrl+C does not wait for.

A real-time replay has up to 256 requests in flight, each a thread blocked on its server's
reply. `concurrent.futures.ThreadPoolExecutor` joins its threads before the program may
exit, so after Ctrl+C the learner waited, with nothing on the screen, until every reply in
flight had ended (measured: 10 to 150 s behind a queue of long prompts). An interrupted
replay records nothing, so nothing is lost by leaving those replies unread: these threads
are daemons, and the program exits as soon as the main thread does.

    pool = Workers(256)
    pool.submit(send, request)     # a thread is started when none is idle, up to 256
    pool.wait()                    # every call submitted has returned (Ctrl+C still leaves)

A call's exceptions are its own to handle (the replay's `Sender.send` counts each one).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class Workers:
    """Up to `size` daemon threads taking calls from one queue, started as they are needed."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.calls: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self.threads = self.unfinished = 0
        self.idle = 0
        """Threads free, less calls queued for one (below 0 when all `size` are busy)."""
        self.changed = threading.Condition()

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        """Run `call(*args)` on a worker thread: an idle one, or a new one while under `size`."""
        with self.changed:
            self.unfinished += 1
            if self.idle <= 0 and self.threads < self.size:
                self.threads += 1
                threading.Thread(target=self._work, name=f"replay-{self.threads}", daemon=True).start()
            else:
                self.idle -= 1  # a free thread's, or the next to be free (a new one is never counted)
        self.calls.put((call, args))

    def wait(self) -> None:
        """Return once every call submitted has returned."""
        with self.changed:
            self.changed.wait_for(lambda: self.unfinished == 0)

    def _work(self) -> None:
        while True:
            call, args = self.calls.get()
            try:
                call(*args)
            finally:
                with self.changed:
                    self.unfinished -= 1
                    self.idle += 1
                    self.changed.notify_all()
