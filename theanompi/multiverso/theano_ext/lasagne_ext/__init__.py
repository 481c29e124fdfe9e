"""Multiverso's ``theano_ext.lasagne_ext``: :mod:`.param_manager` for Lasagne-style networks."""
