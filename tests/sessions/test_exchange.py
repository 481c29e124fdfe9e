import pytest
from conftest import run_mpi


@pytest.mark.parametrize("n", [2, 3])
def test_fused_allreduce_matches_numpy(n):
    proc = run_mpi("check_exchange.py", n)
    assert f"exchange ok on {n} ranks" in proc.stdout
