"""Ranks on other hosts, without namespaces or MPI: the spec travels in the environment, and a lost host is named
from what the survivors' mpiexec printed. (Two hosts for real: tests/sessions/test_two_hosts.py.)"""

import pytest


def test_rank_on_another_host_reads_the_spec_from_its_environment(tmp_path, monkeypatch):
    from theanompi.core.session_options import BSPOptions
    from theanompi.session.remote import REMOTE_SPEC_ENV, encode_spec, load_rank_spec
    from theanompi.session.spec import SessionSpec

    spec = SessionSpec(rule="BSP", devices=["node2:cpu0"], modelfile="m", modelclass="M",
                       options=BSPOptions(run_dir="/r"))
    monkeypatch.setenv(REMOTE_SPEC_ENV, encode_spec(spec.to_json()))
    assert load_rank_spec(str(tmp_path / "absent" / "session.json")) == spec


ABORT = ('[node1:00000] *** An error occurred in Socket closed\n[node1:00000] *** reported by process [1,0]\n'
         'prterun has exited due to process rank 0 with PID 0 on node node1 calling\n"abort". This may have ...\n')
PEER = "An MPI communication peer process has unexpectedly disconnected.\n  Local host: node1\n  Peer host:  node3\n"


@pytest.mark.parametrize("output, expected", [
    (ABORT, "lost host node2: rank 2, rank 3 stopped without reporting an error (killed, or the host went down); "
            "rank 0 lost its connection to them"),
    (PEER + ABORT, "lost host node3: rank 4 stopped without reporting an error (killed, or the host went down); "
                   "rank 0 lost its connection to them"),
])
def test_lost_host_is_named_from_the_survivors_abort(tmp_path, output, expected):
    from theanompi.session.remote import RankStatus, RemoteRanks, status_line

    remote = RemoteRanks(tmp_path)
    for rank, host in ((2, "node2"), (3, "node2"), (4, "node3")):
        assert remote.feed(status_line(RankStatus(rank, "started", host, str(tmp_path))))
    rank_hosts = ["", "", "node2", "node2", "node3"]
    if "node3" not in output:
        rank_hosts = rank_hosts[:4]
    assert remote.lost_host(output, rank_hosts, lambda r: f"rank {r}") == expected
    assert remote.lost_host(output, ["", ""], lambda r: f"rank {r}") is None  # one host: mpiexec's report stands
    assert remote.lost_host("some other failure", rank_hosts, lambda r: f"rank {r}") is None
