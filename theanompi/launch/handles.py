"""The user's handle on a session: ``BSP().init(devices=..., modelfile=..., modelclass=...)``, then ``wait()``.

Theano-MPI's spelling, kept: construct the rule's handle, ``init`` starts the session without blocking (it plans
and checks everything first: bad input raises ConfigError before any rank starts), ``wait`` returns its exit code.
``from theanompi import BSP, EASGD, GOSGD, ASGD`` gives these handles; the rules themselves (what every rank runs)
are :mod:`theanompi.rules`.

Example
-------
>>> from theanompi import BSP
>>> rule = BSP()
>>> rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
...           sync_type="avg", avg_freq=4)          # doctest: +SKIP
>>> rule.wait()                                      # doctest: +SKIP
0
>>> BSP().wait()
Traceback (most recent call last):
...
RuntimeError: BSP.wait() called before init()

Theano-MPI's class attributes are read at ``init``, as Theano-MPI read them: ``BSP.sync_type = 'avg'`` (or
``exch_strategy``) set on the class before ``BSP()`` applies to the sessions it starts, unless ``init`` gets the
keyword itself. A value theanompi does not have is refused in one line naming the alternatives:

>>> BSP.sync_type = "swap"
>>> BSP().init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP")
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: BSP_SYNC_TYPE='swap' is not allowed; use one of: cdd, avg
>>> BSP.sync_type = None                             # back to the option's default (cdd)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

from theanompi import rules
from theanompi.launch.discovery import DeviceSource
from theanompi.launch.elastic import ElasticRun, elastic_enabled
from theanompi.launch.plan import SessionRequest, SessionRun, plan_session, start_session
from theanompi.rules.base import Rule
from theanompi.session.spec import RankSpec, SessionSpec

log = logging.getLogger(__name__)


class Session:
    """A handle on one session of ``rule`` at a time: :meth:`init` (or :meth:`start`) it, then :meth:`wait`."""

    rule: ClassVar[type[Rule] | None] = None
    #: the rule's options that may be set on the handle's class (Theano-MPI's ``BSP.sync_type = 'avg'``)
    class_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, rule: type[Rule] | None = None):
        rule = rule or type(self).rule
        if rule is None:
            raise TypeError("Session() needs a rule, e.g. Session(theanompi.rules.BSP) or theanompi.BSP()")
        self._rule: type[Rule] = rule
        self.spec: SessionSpec | None = None
        self.run: SessionRun | None = None

    @property
    def _name(self) -> str:
        return type(self).__name__ if type(self) is not Session else f"Session({self._rule.name})"

    def init(self, devices: Any, modelfile: str, modelclass: str, model_options: dict[str, Any] | None = None,
             **options: Any) -> Session:
        """Start a session (non-blocking); ``wait()`` returns its exit code.

        ``options`` are the rule's keyword options (``n_epochs``, ``seed``, and the rule's own, e.g. BSP's
        ``sync_type``); ``model_options`` reach the ModelClass as ``config.model_options``. Raises ConfigError on
        bad input, RuntimeError while this object's previous session has not been waited for. May be called from a
        short-lived thread: the session does not end with it.
        """
        self._refuse_a_second_session()
        options = {**self._options_set_on_the_class(), **{k: v for k, v in options.items() if v is not None}}
        request = SessionRequest.from_keywords(self._rule, devices, modelfile, modelclass, model_options, **options)
        spec, ranks = plan_session(request)
        return self.start(spec, ranks)

    def _options_set_on_the_class(self) -> dict[str, Any]:
        """The :attr:`class_options` given a value (on the class, as Theano-MPI did, or on this object)."""
        return {name: getattr(self, name) for name in self.class_options if getattr(self, name, None) is not None}

    def start(self, spec: SessionSpec, ranks: list[RankSpec], source: DeviceSource | None = None) -> Session:
        """Start a planned session (see :func:`theanompi.launch.plan.start_session`); ``wait()`` for it. With
        MAX_RESTARTS or HOST_DISCOVERY it is an elastic one (:mod:`theanompi.launch.elastic`), whose restarts find
        their devices in ``source`` (default: HOST_DISCOVERY, else ``devices``)."""
        self._refuse_a_second_session()
        elastic = elastic_enabled(spec.options)
        self.run = ElasticRun.start(spec, ranks, source) if elastic else start_session(spec, ranks)
        self.spec = spec
        return self

    def _refuse_a_second_session(self) -> None:
        """RuntimeError while this object's session has not been waited for (its outcome would be lost)."""
        if self.run is not None and self.run.code is None:
            raise RuntimeError(f"{self._name}.init(): this object already runs a session "
                               f"(RUN_DIR={str(self.run_dir)!r}); wait() for it first, or use another "
                               f"{self._name}()")

    def wait(self) -> int:
        """Block until the session ends; 0 on success. A failure is logged naming the rank."""
        if self.run is None:
            raise RuntimeError(f"{self._name}.wait() called before init()")
        code = self.run.wait()
        if code != 0:
            log.error("session failed: %s", self.run.failure)
        elif self.run.lost:
            log.warning("session finished; carried on without %s (lost during the session)", "; ".join(self.run.lost))
        return code

    @property
    def failure(self) -> str | None:
        """One line explaining why the session failed (None while running or on success)."""
        return self.run.failure if self.run else None

    @property
    def run_dir(self) -> Path | None:
        return self.spec.run_dir if self.spec else None


class BSP(Session):
    """A BSP session (:mod:`theanompi.rules.bsp`): ``BSP().init(..., sync_type="cdd")``.

    ``BSP.sync_type`` and ``BSP.exch_strategy`` (None: the option's default, or the sync type the
    rule chooses for the ModelClass) may be set on the class before ``BSP()``, as in Theano-MPI.
    """

    rule = rules.BSP
    class_options = ("sync_type", "exch_strategy")
    sync_type: ClassVar[str | None] = None
    exch_strategy: ClassVar[str | None] = None


class EASGD(Session):
    """An EASGD session (:mod:`theanompi.rules.easgd`): ``EASGD().init(..., alpha=0.5, tau=4)``.

    As in Theano-MPI, the first of ``devices`` is the server's and the others are the workers':
    ``devices=["cpu0", "cpu1", "cpu2"]`` starts a server and two workers.
    """

    rule = rules.EASGD


class GOSGD(Session):
    """A GOSGD session (:mod:`theanompi.rules.gosgd`): ``GOSGD().init(..., p=0.1)``."""

    rule = rules.GOSGD


class ASGD(Session):
    """An ASGD session (:mod:`theanompi.rules.asgd`): ``ASGD().init(..., updater="momentum")``."""

    rule = rules.ASGD


__all__ = ["ASGD", "BSP", "EASGD", "GOSGD", "Session"]
