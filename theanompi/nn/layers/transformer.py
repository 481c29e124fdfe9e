"""Spatial transformer layers (Jaderberg et al. 2015): :class:`TransformerLayer` (affine), :class:`TPSTransformerLayer`.

Both resample a (batch, channels, rows, cols) input on a grid that a
localization network moves: each output pixel ``(x_t, y_t)`` (coordinates in
[-1, 1]) reads the input at a source point ``(x_s, y_s)`` by bilinear
interpolation. :class:`TransformerLayer` maps the grid by a 2x3 affine matrix
per example; :class:`TPSTransformerLayer` by a thin plate spline (Bookstein
1989) through control points that the localization network displaces.
Source points outside the input follow ``border_mode``: ``'nearest'`` (clip to
the edge), ``'mirror'`` (reflect) or ``'wrap'`` (periodic).

Example
-------
>>> import numpy as np, pytensor.tensor as pt
>>> from theanompi.nn import InputLayer
>>> l_in, l_theta = InputLayer((None, 1, 4, 4)), InputLayer((None, 6))
>>> layer = TransformerLayer(l_in, l_theta)
>>> x = np.arange(16, dtype="float32").reshape(1, 1, 4, 4)
>>> identity = np.array([[1, 0, 0, 0, 1, 0]], "float32")
>>> np.allclose(layer.get_output_for([pt.constant(x), pt.constant(identity)]).eval(), x)
True
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt

from theanompi.nn.layers.base import MergeLayer
from theanompi.nn.utils import as_expression, as_tuple

__all__ = ["TPSTransformerLayer", "TransformerLayer"]

BORDER_MODES = ("nearest", "mirror", "wrap")


def _check_border_mode(border_mode, who):
    if border_mode not in BORDER_MODES:
        raise ValueError(f"{who}: border_mode must be one of {', '.join(map(repr, BORDER_MODES))}, "
                         f"got {border_mode!r}")
    return border_mode


def _check_image_shape(input_shape, who):
    if len(input_shape) != 4:
        raise ValueError(f"{who}: the input must be 4-dimensional (batch, channels, rows, cols), got shape "
                         f"{input_shape}")


def _downsampled_shape(input_shape, factors):
    """The output shape: the rows and cols divided (floor) by ``factors``, None where unknown."""
    return tuple(input_shape[:2]) + tuple(None if s is None else int(s // f)
                                          for s, f in zip(input_shape[2:], factors))


def _output_sizes(input, static_shape, factors):
    """The output rows and cols: ints where the input's static shape knows them, else int64 expressions."""
    sizes = []
    for axis, factor in zip((2, 3), factors):
        known = static_shape[axis]
        sizes.append(int(known // factor) if known is not None else pt.cast(input.shape[axis] // factor, "int64"))
    return sizes


def _coordinate_dtype(images):
    return images.dtype if images.dtype.startswith("float") else pytensor.config.floatX


def _grid_numpy(rows, cols):
    """(2, rows*cols) float64: the x (fastest) and y coordinates of a rows x cols grid spanning [-1, 1]."""
    x_t, y_t = np.meshgrid(np.linspace(-1.0, 1.0, cols), np.linspace(-1.0, 1.0, rows))
    return np.stack([x_t.ravel(), y_t.ravel()])


def _linspace(num, dtype):
    """``num`` (an expression) points evenly spaced over [-1, 1]."""
    num_f = pt.cast(num, dtype)
    return pt.arange(num, dtype=dtype) * (np.asarray(2.0, dtype) / (num_f - 1)) - np.asarray(1.0, dtype)


def _grid(rows, cols, dtype):
    """:func:`_grid_numpy` as a pytensor expression (a constant where both sizes are ints)."""
    if isinstance(rows, int) and isinstance(cols, int):
        return pt.constant(_grid_numpy(rows, cols).astype(dtype))
    x_t = pt.outer(pt.ones((rows,), dtype=dtype), _linspace(cols, dtype))
    y_t = pt.outer(_linspace(rows, dtype), pt.ones((cols,), dtype=dtype))
    return pt.stack([x_t.flatten(), y_t.flatten()])


def _border_index(coordinate, size, border_mode):
    """Integer pixel indices for float ``coordinate`` (whole numbers) on an axis of ``size`` pixels."""
    if border_mode == "nearest":
        index = pt.clip(coordinate, 0, size - 1)
    elif border_mode == "mirror":
        period = 2 * (size - 1)
        index = pt.minimum(coordinate % period, -coordinate % period)
    else:
        index = coordinate % size
    return pt.cast(index, "int64")


def bilinear_sample(images, xs, ys, rows, cols, border_mode="nearest"):
    """Sample (N, C, H, W) ``images`` at (N, rows*cols) points ``xs``, ``ys`` in [-1, 1]: (N, C, rows, cols).

    Example
    -------
    >>> img = pt.constant(np.arange(4, dtype="float32").reshape(1, 1, 2, 2))
    >>> centre = pt.constant(np.zeros((1, 1), "float32"))
    >>> bilinear_sample(img, centre, centre, 1, 1).eval().ravel().tolist()
    [1.5]
    """
    n, c, h, w = images.shape
    dtype = _coordinate_dtype(images)
    h_f, w_f = pt.cast(h, dtype), pt.cast(w, dtype)
    one = np.asarray(1.0, dtype)
    x = (pt.cast(xs, dtype).flatten() + one) / 2 * (w_f - one)
    y = (pt.cast(ys, dtype).flatten() + one) / 2 * (h_f - one)
    x0, y0 = pt.floor(x), pt.floor(y)
    x1, y1 = x0 + one, y0 + one
    ix0, ix1 = _border_index(x0, w_f, border_mode), _border_index(x1, w_f, border_mode)
    iy0, iy1 = _border_index(y0, h_f, border_mode), _border_index(y1, h_f, border_mode)
    pixels = images.dimshuffle(0, 2, 3, 1).reshape((-1, c))
    base = pt.repeat(pt.arange(n, dtype="int64") * (h * w), rows * cols)

    def pick(iy, ix):
        return pixels[base + iy * w + ix]

    corners = [(pick(iy0, ix0), (x1 - x) * (y1 - y)), (pick(iy1, ix0), (x1 - x) * (y - y0)),
               (pick(iy0, ix1), (x - x0) * (y1 - y)), (pick(iy1, ix1), (x - x0) * (y - y0))]
    out = sum(value * weight.dimshuffle(0, "x") for value, weight in corners)
    return out.reshape((n, rows, cols, c)).dimshuffle(0, 3, 1, 2)


class TransformerLayer(MergeLayer):
    """Affine spatial transformer: resamples the input on a grid mapped by ``theta`` (batch, 6) per example.

    ``theta = [t1, t2, t3, t4, t5, t6]`` maps an output point ``(x_t, y_t)``
    to the source point ``(t1 x_t + t2 y_t + t3, t4 x_t + t5 y_t + t6)``
    (coordinates in [-1, 1]); ``[1, 0, 0, 0, 1, 0]`` is the identity.

    Parameters
    ----------
    incoming : Layer or tuple
        The images, (batch, channels, rows, cols).
    localization_network : Layer
        Gives ``theta``, shape (batch, 6) (linear output; initialise its bias to the identity).
    downsample_factor : float or pair of floats
        The output has ``rows // factor`` rows and ``cols // factor`` cols (< 1 upsamples).
    border_mode : 'nearest', 'mirror' or 'wrap'

    Raises
    ------
    ValueError
        For a localization output that is not (batch, 6), an input that is not 4-D, or another border mode.

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> l_in = InputLayer((None, 3, 28, 28))
    >>> l_loc = DenseLayer(l_in, 6, W=np.zeros((3 * 28 * 28, 6), "float32"),
    ...                    b=np.array([1, 0, 0, 0, 1, 0], "float32"), nonlinearity=None)
    >>> TransformerLayer(l_in, l_loc, downsample_factor=2).output_shape
    (None, 3, 14, 14)
    """

    def __init__(self, incoming, localization_network, downsample_factor=1, border_mode="nearest", **kwargs):
        super().__init__([incoming, localization_network], **kwargs)
        self.downsample_factor = as_tuple(downsample_factor, 2)
        self.border_mode = _check_border_mode(border_mode, "TransformerLayer")
        input_shape, loc_shape = self.input_shapes
        if len(loc_shape) != 2 or loc_shape[-1] != 6:
            raise ValueError(f"TransformerLayer: the localization network must give (batch_size, 6), got shape "
                             f"{loc_shape}")
        _check_image_shape(input_shape, "TransformerLayer")

    def get_output_shape_for(self, input_shapes):
        return _downsampled_shape(input_shapes[0], self.downsample_factor)

    def get_output_for(self, inputs, **kwargs):
        input, theta = (as_expression(v) for v in inputs)
        rows, cols = _output_sizes(input, self.input_shapes[0], self.downsample_factor)
        dtype = _coordinate_dtype(input)
        grid = _grid(rows, cols, dtype)
        homogeneous = pt.concatenate([grid, pt.ones((1, grid.shape[1]), dtype=dtype)], axis=0)
        source = pt.dot(pt.cast(theta, dtype).reshape((-1, 2, 3)), homogeneous)  # (N, 2, rows*cols)
        return bilinear_sample(input, source[:, 0], source[:, 1], rows, cols, self.border_mode)


def _tps_kernel(r2, log, maximum):
    """Bookstein's radial basis ``U = r^2 log(r^2)`` of squared distances (0 at 0), numpy or pytensor."""
    return r2 * log(maximum(r2, 1e-30))


def grid_control_points(num_points):
    """(2, num_points) float64: the x and y of a sqrt(num_points)-square grid of control points over [-1, 1]."""
    side = int(round(np.sqrt(num_points)))
    return _grid_numpy(side, side)


def tps_system_inverse(points):
    """The inverse of the thin plate spline system ``[[0, P^T], [P, U]]`` of (2, K) control ``points``.

    Multiplying its last K columns with the K target values gives the spline's
    coefficients ``[a_1, a_x, a_y, w_1..w_K]``.
    """
    k = points.shape[1]
    affine = np.concatenate([np.ones((k, 1)), points.T], axis=1)  # (K, 3): 1, x, y
    r2 = ((points[:, :, None] - points[:, None, :]) ** 2).sum(axis=0)
    system = np.zeros((k + 3, k + 3))
    system[:3, 3:], system[3:, :3] = affine.T, affine
    system[3:, 3:] = _tps_kernel(r2, np.log, np.maximum)
    return np.linalg.inv(system)


def _tps_basis(grid, points, dtype):
    """(K+3, P): rows 1, x, y and the kernel to every control point, for the (2, P) ``grid`` (numpy or expression)."""
    if isinstance(grid, np.ndarray):
        r2 = ((grid[:, None, :] - points[:, :, None]) ** 2).sum(axis=0)
        basis = np.concatenate([np.ones((1, grid.shape[1])), grid, _tps_kernel(r2, np.log, np.maximum)])
        return pt.constant(basis.astype(dtype))
    pts = pt.constant(points.astype(dtype))
    r2 = ((grid.dimshuffle(0, "x", 1) - pts.dimshuffle(0, 1, "x")) ** 2).sum(axis=0)
    return pt.concatenate([pt.ones((1, grid.shape[1]), dtype=dtype), grid, _tps_kernel(r2, pt.log, pt.maximum)])


class TPSTransformerLayer(MergeLayer):
    """Thin-plate-spline spatial transformer: the localization network moves a grid of control points.

    The localization network gives, per example, the x offsets then the y
    offsets of ``control_points`` points that start on a square grid over the
    image (coordinates in [-1, 1]); the spline through the moved points maps
    the output grid to the source points (all offsets 0: the identity).

    Parameters
    ----------
    incoming : Layer or tuple
        The images, (batch, channels, rows, cols).
    localization_network : Layer
        Gives the offsets, shape (batch, 2 * control_points).
    downsample_factor : float or pair of floats
    control_points : int
        A perfect square (16: a 4 x 4 grid).
    precompute_grid : 'auto' or bool
        Compute the spline basis of the output grid once, in numpy (needs the
        rows and cols; ``'auto'``: where they are known), instead of in the graph.
    border_mode : 'nearest', 'mirror' or 'wrap'

    Raises
    ------
    ValueError
        For a localization output that is not (batch, 2 * control_points), a
        number of points that is not a square, an input that is not 4-D, or
        ``precompute_grid=True`` with unknown rows or cols.

    Example
    -------
    >>> from theanompi.nn import InputLayer
    >>> l_in, l_loc = InputLayer((None, 3, 28, 28)), InputLayer((None, 32))
    >>> TPSTransformerLayer(l_in, l_loc, control_points=16).output_shape
    (None, 3, 28, 28)
    """

    def __init__(self, incoming, localization_network, downsample_factor=1, control_points=16,
                 precompute_grid="auto", border_mode="nearest", **kwargs):
        super().__init__([incoming, localization_network], **kwargs)
        self.border_mode = _check_border_mode(border_mode, "TPSTransformerLayer")
        self.downsample_factor = as_tuple(downsample_factor, 2)
        self.control_points = control_points
        input_shape, loc_shape = self.input_shapes
        if len(loc_shape) != 2 or loc_shape[-1] != 2 * control_points:
            raise ValueError(f"TPSTransformerLayer: the localization network must give (batch_size, "
                             f"2 * control_points) = (batch_size, {2 * control_points}), got shape {loc_shape}")
        if round(np.sqrt(control_points)) ** 2 != control_points:
            raise ValueError(f"TPSTransformerLayer: the number of control points must be a perfect square, got "
                             f"{control_points}")
        _check_image_shape(input_shape, "TPSTransformerLayer")
        known = all(s is not None for s in input_shape[2:])
        if precompute_grid == "auto":
            precompute_grid = known
        elif precompute_grid and not known:
            raise ValueError(f"TPSTransformerLayer: precompute_grid=True needs the input rows and cols, got input "
                             f"shape {input_shape}")
        self.precompute_grid = bool(precompute_grid)
        self.source_points = grid_control_points(control_points)
        self.system_inverse = tps_system_inverse(self.source_points)

    def get_output_shape_for(self, input_shapes):
        return _downsampled_shape(input_shapes[0], self.downsample_factor)

    def get_output_for(self, inputs, **kwargs):
        input, offsets = (as_expression(v) for v in inputs)
        dtype = _coordinate_dtype(input)
        rows, cols = _output_sizes(input, self.input_shapes[0], self.downsample_factor)
        if self.precompute_grid:
            grid = _grid_numpy(rows, cols)
        else:
            grid = _grid(pt.as_tensor_variable(rows), pt.as_tensor_variable(cols), dtype)
        basis = _tps_basis(grid, self.source_points, dtype)  # (K+3, P)
        solve = pt.constant(self.system_inverse[:, 3:].T.astype(dtype))  # (K, K+3)
        # The spline through the unmoved points is the identity, so the source points are the grid plus the
        # spline of the offsets alone (exact for zero offsets, where float32 would leave the kernel terms' residue).
        displacement = pt.cast(offsets, dtype).reshape((-1, 2, self.control_points))
        grid = pt.constant(grid.astype(dtype)) if isinstance(grid, np.ndarray) else grid
        source = grid.dimshuffle("x", 0, 1) + pt.dot(pt.dot(displacement, solve), basis)  # (N, 2, P)
        return bilinear_sample(input, source[:, 0], source[:, 1], rows, cols, self.border_mode)
