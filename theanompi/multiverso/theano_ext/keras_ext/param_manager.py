"""``KerasParamManager``: a Keras model's weights (``get_weights``/``set_weights``) in one server table.

Example
-------
>>> manager = KerasParamManager(model)   # collective: worker 0's weights become everyone's  # doctest: +SKIP
>>> manager.sync_all_param()                                                                 # doctest: +SKIP
"""

from __future__ import annotations

from theanompi.multiverso.theano_ext.param_manager import MVModelParamManager


class KerasParamManager(MVModelParamManager):
    """Any object with ``get_weights()``/``set_weights(list)`` (a Keras model) kept in sync."""

    def get_all_param_values(self) -> list:
        return self.model.get_weights()

    def set_all_param_values(self, values: list) -> None:
        self.model.set_weights(values)
