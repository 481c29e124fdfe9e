"""Waiting without spinning a core: a growing pause between polls of a non-blocking test.

Every loop that polls MPI (``Iprobe``, ``Test``) while nothing else needs the core uses
:class:`Backoff`: no pause after the first miss, then 10 us, doubling up to a ceiling;
a hit starts over. :func:`poll_until` is the common case of waiting for one condition.

Example
-------
>>> answers = iter([False, False, True])
>>> poll_until(lambda: next(answers), max_sleep=1e-4)
>>> Backoff(max_sleep=1e-3).pauses(6)
[0.0, 1e-05, 2e-05, 4e-05, 8e-05, 0.00016]
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: The first non-zero pause (seconds).
FIRST_PAUSE_S = 1e-5


class Backoff:
    """The pause schedule of a polling loop: ``wait()`` after a miss, ``reset()`` after a hit.

    Example
    -------
    >>> backoff = Backoff(max_sleep=2e-5)
    >>> backoff.pauses(4)
    [0.0, 1e-05, 2e-05, 2e-05]
    """

    def __init__(self, max_sleep: float):
        self.max_sleep = max_sleep
        self.pause = 0.0

    def next_pause(self) -> float:
        """The pause to take now; advances the schedule."""
        pause = self.pause
        self.pause = min(max(2.0 * self.pause, FIRST_PAUSE_S), self.max_sleep)
        return pause

    def wait(self) -> None:
        """Sleep for the next pause (no sleep at all for the first)."""
        pause = self.next_pause()
        if pause:
            time.sleep(pause)

    def reset(self) -> None:
        """Something happened: the next miss waits from the start of the schedule again."""
        self.pause = 0.0

    def pauses(self, n: int) -> list[float]:
        """The next ``n`` pauses of a fresh schedule with this ceiling (for reading, not sleeping)."""
        fresh = Backoff(self.max_sleep)
        return [fresh.next_pause() for _ in range(n)]


def poll_until(test: Callable[[], bool], max_sleep: float) -> None:
    """Call ``test()`` until it returns True, with a :class:`Backoff` pause between calls."""
    backoff = Backoff(max_sleep)
    while not test():
        backoff.wait()
