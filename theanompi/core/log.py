"""Rank-prefixed stdlib logging. Rank 0 logs at the session's level; other ranks at WARNING.

Example
-------
>>> setup_logging(rank=0, level="INFO")          # doctest: +SKIP
>>> logging.getLogger("theanompi").info("hello")  # doctest: +SKIP
[rank 0] hello
"""

from __future__ import annotations

import logging
import sys


class _RankFilter(logging.Filter):
    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.rank = self.rank
        return True


def setup_logging(rank: int, level: str = "INFO") -> None:
    """Configure the 'theanompi' logger for this process (idempotent)."""
    logger = logging.getLogger("theanompi")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stdout if rank == 0 else sys.stderr)
    handler.addFilter(_RankFilter(rank))
    handler.setFormatter(logging.Formatter("[rank %(rank)d] %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level if rank == 0 else "WARNING")
    logger.propagate = False
