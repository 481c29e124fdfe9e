"""Theano-MPI's ``theanompi.lib`` spellings on today's code.

* :mod:`theanompi.lib.opt` -- ``pre_model_iter_fn``, ``BSP_SGD``, ``BSP_MSGD``: how a
  Theano-MPI ModelClass builds its training step (two-phase for BSP ``cdd``).
* :mod:`theanompi.lib.recorder` -- ``Recorder`` (:class:`theanompi.session.recorder.Recorder`,
  which also answers Theano-MPI's ``start``/``end``/``train_error``/``val_error``).
"""
