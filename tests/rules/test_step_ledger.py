"""EASGD's step ledger (pure Python, no MPI): grants, reports, lost workers and the exact total."""

import random

import pytest

from theanompi.rules.easgd.step_ledger import StepLedger, StepLedgerError


def simulate(n_workers, tau, target, seed, lose=(), done=0):
    """Workers report in a random order until all are told to stop; ``lose``: (after n reports, worker)."""
    rng = random.Random(seed)
    ledger = StepLedger(n_workers, tau, target, done=done)
    grants = ledger.first_grants()
    reports = 0
    losses = dict(lose)
    while ledger.active:
        assert ledger.reported + sum(ledger.granted) == ledger.assigned <= target
        if reports in losses:
            ledger.lose(losses.pop(reports))
            continue
        k = rng.choice([w for w, g in enumerate(ledger.granted) if g > 0])
        grant = ledger.report(k, ledger.granted[k])
        assert 0 <= grant <= tau
        grants.append(grant)
        reports += 1
    return ledger, grants


@pytest.mark.parametrize("n_workers,tau,target", [(1, 4, 10), (3, 4, 37), (4, 1, 9), (2, 7, 3), (5, 3, 0)])
def test_every_step_of_the_target_is_granted_and_reported_once(n_workers, tau, target):
    for seed in range(5):
        ledger, grants = simulate(n_workers, tau, target, seed)
        assert ledger.is_complete() and ledger.check_final() == 0
        assert sum(grants) == target == sum(ledger.steps)
        assert grants.count(0) == n_workers  # every worker is told to stop exactly once


def test_grants_are_blocks_of_tau_then_the_remainder():
    ledger = StepLedger(n_workers=1, tau=4, target=10)
    assert ledger.first_grants() == [4]
    assert [ledger.report(0, 4), ledger.report(0, 4), ledger.report(0, 2)] == [4, 2, 0]


def test_a_report_that_differs_from_the_grant_is_a_protocol_error():
    ledger = StepLedger(n_workers=2, tau=4, target=10)
    ledger.first_grants()
    with pytest.raises(StepLedgerError, match="worker 1 reported 3 steps, granted 4"):
        ledger.report(1, 3)


def test_a_lost_workers_outstanding_steps_go_to_the_others():
    for seed in range(5):
        ledger, _ = simulate(n_workers=3, tau=4, target=40, seed=seed, lose=[(2, 1)])
        assert ledger.lost == [1] and ledger.is_complete() and ledger.check_final() == 0
        assert sum(ledger.steps) == 40


def test_a_lost_worker_cannot_report_and_is_forgotten_once():
    ledger = StepLedger(n_workers=2, tau=4, target=20)
    ledger.first_grants()
    assert ledger.lose(0) == 4 and ledger.lose(0) == 0 and ledger.assigned == 4
    with pytest.raises(StepLedgerError, match="after it was lost"):
        ledger.report(0, 4)


def test_steps_a_loss_leaves_untrained_are_counted_when_nobody_is_left():
    ledger = StepLedger(n_workers=2, tau=4, target=20)
    ledger.first_grants()
    assert ledger.report(0, 4) == 4 and ledger.report(0, 4) == 4
    ledger.lose(1)
    assert ledger.report(0, 4) == 4
    ledger.lose(0)  # nobody left to train what the two had been granted
    assert ledger.active == 0 and ledger.reported == 12 and ledger.check_final() == 20 - 12


def test_missing_steps_without_a_loss_are_an_error():
    ledger = StepLedger(n_workers=1, tau=4, target=8)
    ledger.first_grants()
    ledger.granted[0] = 0  # as if the worker had stopped early
    ledger.assigned = ledger.reported
    with pytest.raises(StepLedgerError, match="0 steps reported, 8 expected"):
        ledger.check_final()


def test_a_resumed_session_grants_only_the_remaining_steps():
    ledger, grants = simulate(n_workers=2, tau=4, target=30, seed=0, done=24)
    assert sum(grants) == 6 and ledger.reported == 30 and ledger.is_complete()
