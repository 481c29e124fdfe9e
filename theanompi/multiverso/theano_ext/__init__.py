"""Multiverso's ``multiverso.theano_ext`` tree, for pytensor: replace ``multiverso`` by ``theanompi.multiverso``.

* :mod:`.sharedvar`: ``mv_shared``, ``sync_all_mv_shared_vars``
* :mod:`.param_manager`: ``MVModelParamManager`` (the base of the managers below)
* :mod:`.lasagne_ext.param_manager`: ``LasagneParamManager``, ``MVNetParamManager``
* :mod:`.keras_ext.callbacks`: ``MVCallback``; :mod:`.keras_ext.param_manager`: ``KerasParamManager``
"""
