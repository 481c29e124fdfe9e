"""Losses and metrics (Lasagne's ``lasagne.objectives``): elementwise/per-sample, reduced by :func:`aggregate`.

Example
-------
>>> import pytensor.tensor as pt
>>> from theanompi.models.layers import objectives
>>> probs, y = pt.matrix("probs"), pt.ivector("y")
>>> loss = objectives.aggregate(objectives.categorical_crossentropy(probs, y))
>>> acc = objectives.aggregate(objectives.categorical_accuracy(probs, y))
>>> loss.ndim, acc.ndim
(0, 0)
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt

__all__ = [
    "aggregate", "binary_accuracy", "binary_crossentropy", "categorical_accuracy", "categorical_crossentropy",
    "l1", "l2", "squared_error",
]


def _float(x):
    return x if x.dtype.startswith("float") else x.astype(pytensor.config.floatX)


def binary_crossentropy(predictions, targets):
    """``-t log(p) - (1 - t) log(1 - p)`` elementwise (predictions are probabilities).

    Example
    -------
    >>> binary_crossentropy(pt.vector(), pt.vector()).ndim
    1
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    if not targets.dtype.startswith("float"):
        targets = targets.astype(predictions.dtype)
    one = np.asarray(1, dtype=predictions.dtype)
    return -(targets * pt.log(predictions) + (one - targets) * pt.log1p(-predictions))


def categorical_crossentropy(predictions, targets):
    """Per-sample cross-entropy of predicted class probabilities (rows of ``predictions``).

    Parameters
    ----------
    predictions : 2-D tensor
        Probabilities (e.g. a softmax output), one row per sample.
    targets : 1-D int tensor or 2-D tensor
        Class indices (one-hot encoded internally by comparison with
        ``arange``, no advanced indexing) or a target distribution per row.

    Returns
    -------
    1-D tensor
        ``-log(p[i, y_i])`` (``-sum_j t_ij log p_ij`` for distributions).

    Example
    -------
    >>> categorical_crossentropy(pt.matrix(), pt.ivector()).ndim
    1
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    if targets.ndim == predictions.ndim - 1:
        if targets.dtype.startswith("float"):
            raise ValueError(f"categorical_crossentropy: class-index targets must be integers, got dtype "
                             f"{targets.dtype!r}")
        onehot = pt.eq(targets[:, None], pt.arange(predictions.shape[1])[None, :]).astype(predictions.dtype)
        # log of the picked probability: a zero probability of another class gives no 0 * log(0) = nan.
        return -pt.log(pt.sum(onehot * predictions, axis=1))
    if targets.ndim == predictions.ndim:
        return -pt.sum(targets.astype(predictions.dtype) * pt.log(predictions), axis=1)
    raise ValueError(f"categorical_crossentropy: targets must have ndim {predictions.ndim - 1} (class indices) or "
                     f"{predictions.ndim} (distributions), got ndim={targets.ndim}")


def squared_error(a, b):
    """``(a - b) ** 2`` elementwise.

    Example
    -------
    >>> squared_error(pt.vector(), pt.vector()).ndim
    1
    """
    return pt.square(a - b)


def categorical_accuracy(predictions, targets, top_k=1):
    """Per-sample 1.0 if the target class is among the ``top_k`` highest predictions, else 0.0 (floatX).

    Example
    -------
    >>> categorical_accuracy(pt.matrix(), pt.ivector(), top_k=2).ndim
    1
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    if targets.ndim == predictions.ndim:
        targets = pt.argmax(targets, axis=-1)
    elif targets.ndim != predictions.ndim - 1:
        raise ValueError(f"categorical_accuracy: targets must have ndim {predictions.ndim - 1} or "
                         f"{predictions.ndim}, got ndim={targets.ndim}")
    if top_k == 1:
        hit = pt.eq(pt.argmax(predictions, axis=-1), targets)
    else:
        top = pt.argsort(predictions, axis=-1)[..., -top_k:]
        hit = pt.any(pt.eq(top, targets[..., None]), axis=-1)
    return hit.astype(pytensor.config.floatX)


def binary_accuracy(predictions, targets, threshold=0.5):
    """Per-element 1.0 if ``predictions >= threshold`` agrees with binary ``targets``, else 0.0.

    Example
    -------
    >>> binary_accuracy(pt.vector(), pt.vector()).ndim
    1
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    return pt.eq(pt.ge(predictions, np.asarray(threshold, dtype=predictions.dtype)),
                 pt.gt(targets, 0.5)).astype(pytensor.config.floatX)


def aggregate(loss, weights=None, mode="mean"):
    """Reduce an elementwise loss to a scalar.

    Parameters
    ----------
    loss : tensor
    weights : tensor, optional
        Broadcastable to ``loss``; multiplies it first.
    mode : {'mean', 'sum', 'normalized_sum'}
        ``normalized_sum``: sum(weights * loss) / sum(weights) (needs weights).

    Example
    -------
    >>> aggregate(pt.vector(), mode="sum").ndim
    0
    """
    loss = _float(pt.as_tensor_variable(loss))
    if weights is not None:
        loss = loss * weights
    if mode == "mean":
        return pt.mean(loss)
    if mode == "sum":
        return pt.sum(loss)
    if mode == "normalized_sum":
        if weights is None:
            raise ValueError("aggregate: mode='normalized_sum' needs weights")
        return pt.sum(loss) / pt.sum(weights)
    raise ValueError(f"aggregate: mode={mode!r} is not allowed; use 'mean', 'sum' or 'normalized_sum'")


def l2(x):
    """Sum of squares (weight decay penalty; ``regularizable=True`` params).

    Example
    -------
    >>> l2(pt.matrix()).ndim
    0
    """
    return pt.sum(pt.square(x))


def l1(x):
    """Sum of absolute values.

    Example
    -------
    >>> l1(pt.matrix()).ndim
    0
    """
    return pt.sum(pt.abs(x))
