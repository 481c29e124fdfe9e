"""Every rule's worker and server constructor only stores state: no model, no MPI call, no file.

A worker is constructed with everything it works on, built before (``create``); side effects of the session start
in ``run()``. A constructor that reached for the communicator, built the model or touched the run directory would
fail here.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from theanompi.core.session_options import ASGDOptions, BSPOptions, EASGDOptions, GOSGDOptions
from theanompi.rules.asgd import ASGDWorker
from theanompi.rules.bsp import BSPWorker
from theanompi.rules.easgd import EASGDServer, EASGDWorker
from theanompi.rules.easgd.protocol import Connection
from theanompi.rules.easgd.server import ExchangeBuffers, ServerStart
from theanompi.rules.easgd.step_ledger import StepLedger
from theanompi.rules.gosgd import GOSGDWorker
from theanompi.runtime.model_build import BuiltWorker


class Untouchable:
    """An object whose listed attributes may be read, and nothing else."""

    def __init__(self, what: str, **readable):
        self.__dict__.update(readable, _what=what)

    def __getattr__(self, name):
        raise AssertionError(f"a constructor used {self._what}.{name}")


class UntouchableContext(SimpleNamespace):
    def role_comm(self):
        raise AssertionError("a constructor split the session's communicator")

    def ranks_with_role(self, role):
        raise AssertionError("a constructor looked up the session's ranks")

    def options_as(self, options_class):
        assert isinstance(self.options, options_class)
        return self.options


def _built(recorder=None):
    fused = SimpleNamespace(size=4, dtype=np.dtype("float32"), xp=np)
    recorder = Untouchable("the recorder") if recorder is None else recorder
    return BuiltWorker(model=Untouchable("the model"), fused=fused, recorder=recorder, n_epochs=2)


def _ctx(tmp_path, options):
    spec = SimpleNamespace(options=options, run_dir=str(tmp_path / "run"), rule="?")
    return UntouchableContext(spec=spec, options=options, comm=Untouchable("comm", size=2, rank=0), rank=0,
                              role="worker", device="cpu0")


def _comm():
    return Untouchable("comm", size=2, rank=0)


def _server_start():
    return ServerStart(centre=np.zeros(4, "float32"), shard_batches=[3, 3], ledger=StepLedger(2, 4, 12), epochs_done=0,
                       alpha=0.5)


@pytest.mark.parametrize("make", [
    lambda ctx, o: BSPWorker(ctx, _comm(), _built(), o[BSPOptions], "cdd", Untouchable("the exchanger"),
                             Untouchable("the compressor")),
    lambda ctx, o: GOSGDWorker(ctx, _comm(), _built(), o[GOSGDOptions], Untouchable("the gossip comm"),
                               SimpleNamespace(Status=lambda: None)),
    lambda ctx, o: ASGDWorker(ctx, _comm(), _built(), o[ASGDOptions], Untouchable("the client"), 0),
    lambda ctx, o: EASGDWorker(ctx, _built(), o[EASGDOptions],
                               Connection(_comm(), Untouchable("the exchange comm"), 0, [1, 2]),
                               Untouchable("the staging")),
    lambda ctx, o: EASGDServer(ctx, o[EASGDOptions], Connection(_comm(), Untouchable("the exchange comm"), 0, [1, 2]),
                               _built(), _server_start(), ExchangeBuffers.allocate(2, 4, np.dtype("float32")),
                               Untouchable("MPI")),
], ids=["BSP", "GOSGD", "ASGD", "EASGD worker", "EASGD server"])
def test_a_constructor_only_stores_state(tmp_path, make):
    options = {cls: cls(resume="/nonexistent/checkpoint", updater="sgd") if cls is ASGDOptions
               else cls(resume="/nonexistent/checkpoint")
               for cls in (BSPOptions, GOSGDOptions, ASGDOptions, EASGDOptions)}
    ctx = _ctx(tmp_path, options[EASGDOptions])
    loop = make(ctx, options)
    assert not (tmp_path / "run").exists()
    assert getattr(loop, "iteration", 0) == 0


def test_start_resumes_before_the_rules_start(tmp_path, monkeypatch):
    calls = []
    options = BSPOptions(resume="/nonexistent/checkpoint")
    recorder = SimpleNamespace(open_board=lambda spec: calls.append("board"))
    worker = BSPWorker(_ctx(tmp_path, options), _comm(), _built(recorder), options, "cdd", Untouchable("the exchanger"),
                       Untouchable("the compressor"))
    monkeypatch.setattr(worker, "restore", lambda path: calls.append(path) or 3)
    monkeypatch.setattr(worker, "start_rule", lambda: calls.append("rule"))
    worker.start()
    assert calls == ["board", options.resume, "rule"] and worker.start_epoch == 3
