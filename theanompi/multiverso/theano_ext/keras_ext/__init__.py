"""Multiverso's ``theano_ext.keras_ext``: :mod:`.callbacks` (``MVCallback``) and :mod:`.param_manager`."""
