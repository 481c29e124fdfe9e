"""Short path of :mod:`theanompi.multiverso.theano_ext.sharedvar` (Multiverso's ``theano_ext.sharedvar``)."""

from theanompi.multiverso.theano_ext.sharedvar import mv_shared, sync_all_mv_shared_vars

__all__ = ["mv_shared", "sync_all_mv_shared_vars"]
