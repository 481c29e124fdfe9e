"""What the exchangers and the parameter server count as sent (theanompi.comm.traffic) against Open MPI's own count
of the bytes each rank's point-to-point layer sent (its ``monitoring`` pml, which sees the messages collectives are
made of too), under real mpiexec."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import run_mpi


def monitored_bytes(prof_dir: Path, rank: int, kinds: str) -> int:
    """Bytes rank ``rank`` sent as Open MPI's monitoring saw them: ``kinds`` "E" (the program's own point-to-point
    messages) and/or "I" (the messages of collectives)."""
    text = (prof_dir / f"prof.{rank}.prof").read_text()
    return sum(int(n) for kind, n in re.findall(r"^([EI])\t\d+\t\d+\t(\d+) bytes", text, re.M) if kind in kinds)


def counted(stdout: str) -> dict[int, int]:
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"rank"')]
    return {row["rank"]: row["counted"] for row in rows}


@pytest.fixture
def monitoring(tmp_path, monkeypatch):
    monkeypatch.setenv("OMPI_MCA_pml_monitoring_enable", "2")  # 2: the program's messages apart from collectives'
    monkeypatch.setenv("OMPI_MCA_pml_monitoring_enable_output", "3")  # a file per rank at MPI_Finalize
    monkeypatch.setenv("OMPI_MCA_pml_monitoring_filename", str(tmp_path / "prof"))
    return tmp_path


def test_the_exchangers_count_what_their_sums_and_broadcasts_send(monitoring):
    ours = counted(run_mpi("check_traffic.py", 2, "exchangers").stdout)
    assert sorted(ours) == [0, 1]
    # with 2 ranks every allreduce algorithm sends the whole buffer once; the fp16 sum is point-to-point; a
    # communicator's duplication (the fp16 transport's) adds a few bytes of MPI's own
    for rank, mine in ours.items():
        assert mine == pytest.approx(monitored_bytes(monitoring, rank, "EI"), rel=0.005, abs=200), rank
    assert ours[0] > ours[1]  # rank 0 rooted the 1 MB broadcast, rank 1 only the 4 KB one


def test_the_parameter_server_client_and_server_count_every_message_exactly(monitoring):
    ours = counted(run_mpi("check_traffic.py", 3, "ps").stdout)
    assert sorted(ours) == [0, 1, 2]
    for rank, mine in ours.items():
        assert mine == monitored_bytes(monitoring, rank, "E"), rank
    assert ours[0] - ours[1] == 40_000 + 64  # rank 0 also set the table: its values and a request header
    assert ours[2] > 6 * 40_000  # the server sent the values of six reads
