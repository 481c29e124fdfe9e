"""Every rule's worker and server constructor only stores state: no model, no MPI call, no file.

Side effects start in ``run()`` (through ``setup()``); a constructor that reached for the
communicator, built the model or touched the run directory would fail here.
"""

from types import SimpleNamespace

import pytest

from theanompi import training
from theanompi.options import COMMON_OPTIONS
from theanompi.rules.asgd import ASGDWorker
from theanompi.rules.bsp import BSPWorker
from theanompi.rules.easgd import EASGDServer, EASGDWorker
from theanompi.rules.gosgd import GOSGDWorker
from theanompi.session_options import SessionOptions


class UntouchableComm:
    """A communicator whose size and rank may be read, and nothing else."""

    size, rank = 2, 0

    def __getattr__(self, name):
        raise AssertionError(f"a constructor called comm.{name}")


class UntouchableContext(SimpleNamespace):
    def role_comm(self):
        raise AssertionError("a constructor split the session's communicator")

    def ranks_with_role(self, role):
        raise AssertionError("a constructor looked up the session's ranks")


OPTIONS = {"sync_type": "cdd", "exch_strategy": "ar", "avg_freq": 1, "p": 0.5, "updater": "sgd", "sync": False,
           "alpha": 0.5, "tau": 4, "seed": 0, "resume": "/nonexistent/checkpoint"}


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a constructor built the model")

    monkeypatch.setattr(training, "build_model", no_model)
    spec = SimpleNamespace(options=dict(OPTIONS), run_dir=str(tmp_path / "run"), rule="?")
    options = SessionOptions({**{o.name: o.default for o in COMMON_OPTIONS}, **OPTIONS})
    return UntouchableContext(spec=spec, options=options, comm=UntouchableComm(), rank=0,
                              role="worker", device="cpu0")


@pytest.mark.parametrize("make", [
    lambda ctx: BSPWorker(ctx),
    lambda ctx: GOSGDWorker(ctx),
    lambda ctx: ASGDWorker(ctx, ctx.comm),
    lambda ctx: EASGDWorker(ctx),
    lambda ctx: EASGDServer(ctx),
], ids=["BSP", "GOSGD", "ASGD", "EASGD worker", "EASGD server"])
def test_a_constructor_only_stores_state(ctx, tmp_path, make):
    loop = make(ctx)
    assert not loop.is_set_up and getattr(loop, "model", None) is None
    assert not (tmp_path / "run").exists()


def test_setup_runs_once(ctx, monkeypatch):
    calls = []
    worker = BSPWorker(ctx)
    monkeypatch.setattr(worker, "setup_before_model", lambda: calls.append("before"))
    monkeypatch.setattr(training, "build_model", lambda *a: SimpleNamespace(params=[], data=None))
    monkeypatch.setattr(training, "FusedParams", lambda params, where: SimpleNamespace(where=where))
    monkeypatch.setattr(worker, "make_recorder", lambda: SimpleNamespace(record_phase=lambda phase, seconds: None))
    monkeypatch.setattr(worker, "restore", lambda path: calls.append(path) or 3)
    monkeypatch.setattr(worker, "setup_rule", lambda: calls.append("rule"))
    worker.setup()
    worker.setup()
    assert calls == ["before", OPTIONS["resume"], "rule"] and worker.start_epoch == 3 and worker.is_set_up
