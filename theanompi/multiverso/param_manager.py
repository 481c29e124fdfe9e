"""Short path of :mod:`theanompi.multiverso.theano_ext.lasagne_ext.param_manager`."""

from theanompi.multiverso.theano_ext.lasagne_ext.param_manager import LasagneParamManager, MVNetParamManager
from theanompi.multiverso.theano_ext.param_manager import MVModelParamManager

__all__ = ["LasagneParamManager", "MVModelParamManager", "MVNetParamManager"]
