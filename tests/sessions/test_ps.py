"""Parameter server under a real mpiexec: sums, master init, rows, updaters, sync rounds, misuse."""

import pytest
from conftest import run_mpi


@pytest.mark.parametrize("mode, servers, ranks", [("async", 1, 3), ("async", 2, 4), ("sync", 1, 4), ("sync", 2, 4)])
def test_parameter_server(mode, servers, ranks):
    proc = run_mpi("check_ps.py", ranks, mode, str(servers), timeout=120)
    assert f"ps ok ({mode}, {servers} servers, {ranks - servers} clients)" in proc.stdout


@pytest.mark.parametrize("servers", [1, 2])
def test_staleness_modes_against_numpy(servers):
    proc = run_mpi("check_ps_staleness.py", servers + 2, str(servers), timeout=120)
    assert f"staleness ok ({servers} servers, 2 clients)" in proc.stdout


def test_a_table_saved_by_3_servers_is_restored_onto_2_bit_for_bit():
    proc = run_mpi("check_ps_repartition.py", 6, timeout=120)
    assert "repartitioned: 3 servers -> 2, bit for bit" in proc.stdout


def test_bounded_staleness_rates_and_averages():
    """ASGD_MAX_STALENESS holds a pull that runs ahead; an add's learning rate and average decay, through real
    servers, against NumPy."""
    proc = run_mpi("check_ps_bounded.py", 5, timeout=120)
    assert "bounded staleness, rates and averages: OK" in proc.stdout
