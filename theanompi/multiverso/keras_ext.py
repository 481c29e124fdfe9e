"""Short path of :mod:`theanompi.multiverso.theano_ext.keras_ext.callbacks` (needs Keras 3)."""

from theanompi.multiverso.theano_ext.keras_ext.callbacks import MVCallback

__all__ = ["MVCallback"]
