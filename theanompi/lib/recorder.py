"""``from theanompi.lib.recorder import Recorder`` as Theano-MPI models write it.

The class is :class:`theanompi.session.recorder.Recorder`; it answers both spellings
(``timer``/``record_train`` and Theano-MPI's ``start``/``end``/``train_error``/``val_error``).

Example
-------
>>> from theanompi.lib.recorder import Recorder
>>> rec = Recorder(run_dir=None)
>>> rec.start(); rec.end("calc"); rec.train_error(0, 0.5, 0.25)
>>> rec.train_means()
(0.5, 0.25)
"""

from theanompi.session.recorder import Recorder

__all__ = ["Recorder"]
