"""Data layers (:class:`Subtract`, :class:`Crop`), reshaping layers (:class:`Dimshuffle`, :class:`Flatten`)
and :class:`Dropout`.

:class:`Crop` and :class:`Dropout` keep a class-level registry of their instances so that a model can switch
all of them between training and validation behaviour at once (``Crop.SetRandCropOff()``,
``Dropout.SetDropoutOff()`` before validation, ``...On()`` after), as Theano-MPI's model files do. The
switch is a floatX shared flag read when a compiled function runs, so no recompilation is needed.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> x = pt.tensor4("x")                                            # c01b
>>> crop = Crop(x, output_shape=(3, 4, 4, 2), input_shape=(3, 6, 6, 2), printinfo=False)
>>> shuffle = Dimshuffle(crop, (3, 0, 1, 2), printinfo=False)      # to bc01
>>> flat = Flatten(shuffle, 2, printinfo=False)
>>> flat.output_shape
(2, 48)
>>> Crop.SetRandCropOff()                                          # centre crop
>>> f = pytensor.function([x], flat.output)
>>> v = np.arange(216, dtype="float32").reshape(3, 6, 6, 2)
>>> bool((f(v) == v[:, 1:5, 1:5, :].transpose(3, 0, 1, 2).reshape(2, -1)).all())
True
>>> Crop.SetRandCropOn()
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.ifelse import ifelse

from theanompi.models.layers2.base import Layer, draw_uniform, layer_rng

__all__ = ["Crop", "Dimshuffle", "Dropout", "Flatten", "Subtract"]


def _flag(value: float):
    return pytensor.shared(np.asarray(value, dtype=pytensor.config.floatX))


class Subtract(Layer):
    """Subtracts a fixed array (a mean image) from a c01b batch.

    Parameters
    ----------
    input : Layer or TensorVariable
        c01b batch of shape (c, rows, cols, batch).
    subtract_arr : numpy.ndarray
        Shape (c, rows, cols, 1): broadcast over the batch.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> s = Subtract(pt.tensor4("x"), np.ones((3, 4, 4, 1)), input_shape=(3, 4, 4, 8), printinfo=False)
    >>> s.output_shape, s.sub_arr.dtype
    ((3, 4, 4, 8), 'float32')
    """

    name = "Subtract"

    def __init__(self, input, subtract_arr, printinfo=True, input_shape=None, output_shape=None):
        self.get_input_shape(input, input_shape)
        arr = np.asarray(subtract_arr)
        if arr.ndim != len(self.input_shape) or arr.shape[:-1] != self.input_shape[:-1] or arr.shape[-1] != 1:
            raise ValueError(f"Subtract: subtract_arr must have shape {self.input_shape[:-1] + (1,)} for input "
                             f"shape {self.input_shape}, got {arr.shape}")
        self.sub_arr = pytensor.shared(arr.astype(pytensor.config.floatX), shape=(None,) * (arr.ndim - 1) + (1,))
        self.output = self.input - self.sub_arr
        self.set_output_shape(self.input_shape, output_shape)
        if printinfo:
            self.print_shape()


def _offset(u, margin: int):
    """An int offset in [0, margin] from a uniform [0, 1) draw ``u``."""
    return pt.minimum(pt.floor(u * (margin + 1)), margin).astype("int64")


class Crop(Layer):
    """Random crop and horizontal mirror of a c01b batch while training; centre crop when switched off.

    Parameters
    ----------
    input : Layer or TensorVariable
        c01b batch (c, rows, cols, batch).
    output_shape : tuple
        (c, crop_rows, crop_cols, batch).
    flag_batch : bool
        True: one random offset and mirror decision for the whole batch (cheap slicing).
        False: an independent offset and mirror decision per image.

    Offsets are uniform over every position of the window in the image; an image is mirrored (its
    columns reversed) with probability 1/2.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> Crop(pt.tensor4("x"), (3, 24, 24, 16), input_shape=(3, 32, 32, 16), flag_batch=True,
    ...      printinfo=False).output_shape
    (3, 24, 24, 16)
    """

    name = "Crop"
    layers: list = []

    def __init__(self, input, output_shape, input_shape=None, flag_batch=False, printinfo=True):
        self.get_input_shape(input, input_shape)
        c, rows, cols, batch = self._check_shapes(output_shape)
        margin_r, margin_c = self.input_shape[1] - rows, self.input_shape[2] - cols
        x = self.input
        u = draw_uniform(layer_rng("Crop"), (3,) if flag_batch else (3, x.shape[3]))
        off_r, off_c = _offset(u[0], margin_r), _offset(u[1], margin_c)
        mirror = pt.lt(u[2], 0.5)
        if flag_batch:
            window = x[:, off_r:off_r + rows, off_c:off_c + cols, :]
            step = 1 - 2 * mirror.astype("int64")
            random_crop = window[:, :, ::step, :]
        else:
            random_crop = self._per_image_crop(x, off_r, off_c, mirror, rows, cols)
        top, left = margin_r // 2, margin_c // 2
        centre_crop = x[:, top:top + rows, left:left + cols, :]
        self.flag_on = _flag(1.0)
        self.output = ifelse(pt.gt(self.flag_on, 0.5), random_crop, centre_crop)
        self.output_shape = (c, rows, cols, self.input_shape[3])
        Crop.layers.append(self)
        if printinfo:
            self.print_shape()

    def _check_shapes(self, output_shape):
        if len(self.input_shape) != 4:
            raise ValueError(f"Crop: input must be 4-D c01b, got input shape {self.input_shape}")
        try:
            c, rows, cols, batch = (int(d) for d in output_shape)
        except (TypeError, ValueError):
            raise ValueError(f"Crop: output_shape must be (c, rows, cols, batch), got {output_shape!r}") from None
        if c != self.input_shape[0] or not (0 < rows <= self.input_shape[1] and 0 < cols <= self.input_shape[2]):
            raise ValueError(f"Crop: output_shape {tuple(output_shape)} does not fit in input shape "
                             f"{self.input_shape} (same channels, crop no larger than the image)")
        return c, rows, cols, batch

    @staticmethod
    def _per_image_crop(x, off_r, off_c, mirror, rows: int, cols: int):
        """Gather x[:, off_r[b] + i, off_c[b] + j (reversed if mirror[b]), b] for every image b."""
        i, j = pt.arange(rows), pt.arange(cols)
        row_idx = i[:, None, None] + off_r[None, None, :]
        col_idx = pt.switch(mirror[None, None, :], cols - 1 - j[None, :, None], j[None, :, None]) + off_c[None, None, :]
        batch_idx = pt.arange(x.shape[3])[None, None, :]
        return x[:, row_idx, col_idx, batch_idx]

    @staticmethod
    def SetRandCropOn() -> None:
        """Random crops (training) in every Crop layer."""
        for layer in Crop.layers:
            layer.flag_on.set_value(1.0)

    @staticmethod
    def SetRandCropOff() -> None:
        """Centre crops (validation) in every Crop layer."""
        for layer in Crop.layers:
            layer.flag_on.set_value(0.0)


class Dimshuffle(Layer):
    """Reorders axes: ``output = input.dimshuffle(*new_axis_order)`` (``'x'`` adds a length-1 axis).

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> Dimshuffle(pt.tensor4("x"), (3, 0, 1, 2), input_shape=(3, 28, 28, 16), printinfo=False).output_shape
    (16, 3, 28, 28)
    """

    name = "Dimshuffle"

    def __init__(self, input, new_axis_order, printinfo=True, input_shape=None, output_shape=None):
        self.get_input_shape(input, input_shape)
        order = tuple(new_axis_order)
        axes = [a for a in order if a != "x"]
        if sorted(axes) != list(range(len(self.input_shape))):
            raise ValueError(f"Dimshuffle: new_axis_order {order!r} must list every axis of input shape "
                             f"{self.input_shape} once ('x' adds an axis)")
        self.output = self.input.dimshuffle(*order)
        self.set_output_shape((1 if a == "x" else self.input_shape[a] for a in order), output_shape)
        if printinfo:
            self.print_shape()


class Flatten(Layer):
    """Keeps the first ``axis - 1`` axes and flattens the rest into one (``pytensor.tensor.flatten``).

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> Flatten(pt.tensor4("x"), 2, input_shape=(8, 64, 2, 2), printinfo=False).output_shape
    (8, 256)
    """

    name = "Flatten"

    def __init__(self, input, axis, printinfo=True, input_shape=None, output_shape=None):
        self.get_input_shape(input, input_shape)
        if not isinstance(axis, numbers.Integral) or not 1 <= axis <= len(self.input_shape):
            raise ValueError(f"Flatten: axis must be an int in [1, {len(self.input_shape)}] for input shape "
                             f"{self.input_shape}, got {axis!r}")
        self.output = pt.flatten(self.input, int(axis))
        kept = self.input_shape[:axis - 1]
        self.set_output_shape(kept + (int(np.prod(self.input_shape[axis - 1:])),), output_shape)
        if printinfo:
            self.print_shape()


class Dropout(Layer):
    """Zeroes each entry with probability ``prob_drop`` while on; scales by ``1 - prob_drop`` while off.

    Kept entries are not rescaled during training (Theano-MPI's convention), so the output's expected
    value is ``(1 - prob_drop) * input`` in both modes. ``n_out`` is accepted for Theano-MPI's signature.

    Example
    -------
    >>> import pytensor, pytensor.tensor as pt
    >>> d = Dropout(pt.matrix("h"), n_out=4, prob_drop=0.5, input_shape=(2, 4), printinfo=False)
    >>> Dropout.SetDropoutOff()
    >>> pytensor.function([d.input], d.output)(np.ones((2, 4), "float32")).tolist()
    [[0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5]]
    >>> Dropout.SetDropoutOn()
    """

    name = "Dropout"
    layers: list = []

    def __init__(self, input, n_out=None, prob_drop=0.5, printinfo=True, input_shape=None):
        self.get_input_shape(input, input_shape)
        if not 0 <= prob_drop < 1:
            raise ValueError(f"Dropout: prob_drop must be in [0, 1), got {prob_drop!r}")
        self.prob_drop = float(prob_drop)
        self.prob_keep = 1.0 - self.prob_drop
        self.flag_on = _flag(1.0)
        self.flag_off = 1.0 - self.flag_on
        floatX = pytensor.config.floatX
        self.mask = pt.lt(draw_uniform(layer_rng("Dropout"), self.input.shape), self.prob_keep).astype(floatX)
        keep = np.asarray(self.prob_keep, dtype=floatX)
        self.output = self.input * (self.flag_on * self.mask + self.flag_off * keep)
        self.output_shape = self.input_shape
        self.name = f"Dropout{self.prob_drop}"
        Dropout.layers.append(self)
        if printinfo:
            self.print_shape()

    @staticmethod
    def SetDropoutOn() -> None:
        """Random masks (training) in every Dropout layer."""
        for layer in Dropout.layers:
            layer.flag_on.set_value(1.0)

    @staticmethod
    def SetDropoutOff() -> None:
        """Deterministic scaling (validation) in every Dropout layer."""
        for layer in Dropout.layers:
            layer.flag_on.set_value(0.0)
