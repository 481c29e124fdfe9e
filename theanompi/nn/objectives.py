"""Losses and metrics (Lasagne's ``lasagne.objectives``): elementwise/per-sample, reduced by :func:`aggregate`.

Example
-------
>>> import pytensor.tensor as pt
>>> from theanompi.nn import objectives
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
    "aggregate", "align_targets", "binary_accuracy", "binary_crossentropy", "binary_hinge_loss",
    "categorical_accuracy", "categorical_crossentropy", "huber_loss", "l1", "l2", "multiclass_hinge_loss",
    "squared_error",
]


def _float(x):
    return x if x.dtype.startswith("float") else x.astype(pytensor.config.floatX)


def align_targets(predictions, targets):
    """``(predictions, targets)`` as tensors, a target vector made a column for a one-unit output (N, 1).

    Without this a sigmoid output of shape (N, 1) against targets of shape
    (N,) would broadcast to an (N, N) loss. As in Lasagne, only that case
    is changed (a column whose second dimension is statically 1).

    Example
    -------
    >>> p, t = align_targets(pt.tensor(shape=(None, 1)), pt.vector())
    >>> t.type.shape
    (None, 1)
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    if predictions.ndim == 2 and predictions.type.shape[1] == 1 and predictions.type.shape[0] != 1 \
            and targets.ndim == 1:
        targets = targets.dimshuffle(0, "x")
    return predictions, targets


def binary_crossentropy(predictions, targets):
    """``-t log(p) - (1 - t) log(1 - p)`` elementwise (predictions are probabilities; see :func:`align_targets`).

    Example
    -------
    >>> binary_crossentropy(pt.tensor(shape=(None, 1)), pt.vector()).ndim
    2
    """
    predictions, targets = align_targets(predictions, targets)
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
    """``(a - b) ** 2`` elementwise (``b`` aligned to ``a`` by :func:`align_targets`).

    Example
    -------
    >>> squared_error(pt.vector(), pt.vector()).ndim
    1
    """
    a, b = align_targets(a, b)
    return pt.square(a - b)


def binary_hinge_loss(predictions, targets, delta=1, log_odds=True, binary=True):
    """``max(0, delta - predictions * targets)`` elementwise, for binary classification.

    Parameters
    ----------
    predictions : tensor
        Log-odds (``log_odds=True``) or probabilities (``log_odds=False``:
        turned into log-odds first).
    targets : tensor
        0/1 (``binary=True``: mapped to -1/+1) or -1/+1 (``binary=False``).
    delta : float
        The margin.

    Example
    -------
    >>> p, t = pt.vector(), pt.vector()
    >>> binary_hinge_loss(p, t).eval({p: [2.0, 0.5], t: [1.0, 0.0]}).tolist()
    [0.0, 1.5]
    """
    predictions = pt.as_tensor_variable(predictions)
    if not log_odds:
        predictions = pt.log(predictions / (1 - predictions))
    if binary:
        targets = 2 * pt.as_tensor_variable(targets) - 1
    predictions, targets = align_targets(predictions, targets)
    return pt.maximum(delta - predictions * targets, 0)


def multiclass_hinge_loss(predictions, targets, delta=1):
    """Per sample ``max(0, max_{j != y} p_j - p_y + delta)`` (Crammer-Singer multi-class hinge).

    Parameters
    ----------
    predictions : 2-D tensor
        One row of class scores per sample.
    targets : 1-D int tensor or 2-D one-hot tensor
    delta : float
        The margin.

    Raises
    ------
    TypeError
        When ``targets`` has neither ``predictions.ndim - 1`` nor ``predictions.ndim`` dimensions.

    Example
    -------
    >>> p, y = pt.matrix(), pt.ivector()
    >>> multiclass_hinge_loss(p, y).eval({p: [[3.0, 1.0, 2.5]], y: [0]}).tolist()
    [0.5]
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    if targets.ndim == predictions.ndim - 1:
        onehot = pt.eq(targets[:, None], pt.arange(predictions.shape[1])[None, :])
    elif targets.ndim == predictions.ndim:
        onehot = pt.neq(targets, 0)
    else:
        raise TypeError(f"multiclass_hinge_loss: rank mismatch between targets (ndim={targets.ndim}) and "
                        f"predictions (ndim={predictions.ndim})")
    correct = pt.sum(pt.switch(onehot, predictions, 0), axis=1)
    lowest = pt.min(predictions) - 1
    best_other = pt.max(pt.switch(onehot, lowest, predictions), axis=1)
    return pt.maximum(best_other - correct + delta, 0)


def huber_loss(predictions, targets, delta=1):
    """Huber loss elementwise: ``d**2 / 2`` where ``|d| <= delta``, else ``delta * (|d| - delta / 2)``; d = t - p.

    Example
    -------
    >>> p, t = pt.vector(), pt.vector()
    >>> huber_loss(p, t).eval({p: [0.0, 0.0], t: [0.5, 3.0]}).tolist()
    [0.125, 2.5]
    """
    predictions, targets = align_targets(predictions, targets)
    abs_diff = pt.abs(targets - predictions)
    quadratic = 0.5 * pt.square(targets - predictions)
    linear = delta * (abs_diff - delta / 2.0)
    return pt.switch(pt.le(abs_diff, delta), quadratic, linear)


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
        raise TypeError(f"categorical_accuracy: rank mismatch between targets (ndim={targets.ndim}) and "
                        f"predictions (ndim={predictions.ndim})")
    if top_k == 1:
        hit = pt.eq(pt.argmax(predictions, axis=-1), targets)
    else:
        top = pt.argsort(predictions, axis=-1)[..., -top_k:]
        hit = pt.any(pt.eq(top, targets[..., None]), axis=-1)
    return hit.astype(pytensor.config.floatX)


def binary_accuracy(predictions, targets, threshold=0.5):
    """Per element 1.0 if ``predictions >= threshold`` agrees with binary ``targets``, else 0.0.

    ``targets`` are aligned as in :func:`align_targets`.

    Example
    -------
    >>> binary_accuracy(pt.tensor(shape=(None, 1)), pt.vector()).ndim
    2
    """
    predictions, targets = align_targets(predictions, targets)
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
            raise ValueError("aggregate: require weights for mode='normalized_sum'")
        return pt.sum(loss) / pt.sum(weights)
    raise ValueError(f"aggregate: mode must be 'mean', 'sum' or 'normalized_sum', got {mode!r}")


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
