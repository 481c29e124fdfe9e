"""``lasagne.theano_extensions``: Lasagne's alternative 1-D convolutions (:mod:`.conv`) and padding (:mod:`.padding`).

Example
-------
>>> from theanompi.lasagne.theano_extensions import conv, padding
>>> conv.conv1d_mc0.__name__, padding.pad.__name__
('conv1d_mc0', 'pad_tensor')
"""

from theanompi.lasagne.theano_extensions import conv, padding

__all__ = ["conv", "padding"]
