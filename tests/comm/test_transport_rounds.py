"""Transport.exchange_with_all's pairwise rounds: which messages go together (no MPI: a transport that records)."""

import numpy as np

from theanompi.comm.exchange.transport import Transport
from theanompi.comm.traffic import SentBytes


class Recording(Transport):
    """Rank ``rank`` of ``size``; every exchange is recorded as ((to, ...), (from, ...))."""

    xp = np

    def __init__(self, rank, size, rounds=True):
        self.rank, self.size, self.sent, self.calls = rank, size, SentBytes(), []
        self.pairwise_rounds = rounds

    def exchange(self, sends, recvs):
        self.calls.append((tuple(peer for peer, _ in sends), tuple(peer for peer, _ in recvs)))

    def bcast(self, buf, root=0):
        return buf


def test_round_k_sends_to_rank_plus_k_and_receives_from_rank_minus_k():
    t = Recording(rank=1, size=4)
    t.exchange_with_all(sends=[(p, None) for p in (0, 2, 3)], recvs=[(p, None) for p in (0, 2, 3)])
    assert t.calls == [((2,), (0,)), ((3,), (3,)), ((0,), (2,))]


def test_every_rank_is_matched_in_the_same_round_and_absent_peers_are_skipped():
    """For each round, rank r's send to r + k meets that rank's receive from (r + k) - k; a peer a rank has nothing
    for (an empty chunk) is left out of that round only."""
    size = 5
    ranks = [Recording(r, size) for r in range(size)]
    for t in ranks:
        others = [p for p in range(size) if p != t.rank]
        t.exchange_with_all(sends=[(p, None) for p in others if p != 3], recvs=[(p, None) for p in others
                                                                                 if t.rank != 3])
    for k in range(size - 1):
        for t in ranks:
            (to,) = t.calls[k][0] or (None,)
            if to is not None:
                assert ranks[to].calls[k][1] == (t.rank,), (k, t.rank, to)
    assert all(3 not in t.calls[k][0] for t in ranks for k in range(size - 1))


def test_without_rounds_one_grouped_exchange():
    t = Recording(rank=0, size=3, rounds=False)
    t.exchange_with_all(sends=[(1, None), (2, None)], recvs=[(1, None), (2, None)])
    assert t.calls == [((1, 2), (1, 2))]
