"""Optimizers (Lasagne's ``lasagne.updates``): each returns an ``OrderedDict`` of updates for ``pytensor.function``.

``loss_or_grads`` is a scalar loss (gradients are taken with ``pytensor.grad``)
or a list of gradient expressions, one per parameter. Hyper-parameters are
numbers or scalar shared variables (to change them while training); every
update keeps its parameter's dtype (float32 stays float32).

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from theanompi.nn import updates
>>> w = pytensor.shared(np.ones(3, "float32"), name="w")
>>> loss = pt.sum(w ** 2)
>>> step = pytensor.function([], loss, updates=updates.nesterov_momentum(loss, [w], 0.1))
>>> _ = step(); round(float(w.get_value()[0]), 3)     # v = -0.1*2; w = 1 + 0.9*v - 0.1*2
0.62
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable

__all__ = [
    "adadelta", "adagrad", "adam", "adamax", "amsgrad", "apply_momentum", "apply_nesterov_momentum",
    "get_or_compute_grads", "momentum", "nesterov_momentum", "norm_constraint", "rmsprop", "sgd",
    "total_norm_constraint",
]


def _const(value, dtype):
    """A hyper-parameter as a ``dtype`` expression (numbers become constants, shared scalars are cast)."""
    if isinstance(value, pytensor.graph.basic.Variable):
        return value if value.dtype == dtype else value.astype(dtype)
    return pt.constant(np.asarray(value, dtype=dtype))


def get_or_compute_grads(loss_or_grads, params):
    """``loss_or_grads`` if it is a list of gradients, else ``pytensor.grad(loss_or_grads, params)``.

    Raises
    ------
    ValueError
        If a param is not a shared variable or the gradient list has the wrong length.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(get_or_compute_grads(pt.sum(w), [w]))
    1
    """
    params = list(params)
    bad = [p for p in params if not isinstance(p, SharedVariable)]
    if bad:
        raise ValueError(f"params must be shared variables (to be updated), got {bad!r}; "
                         "lasagne.utils.collect_shared_vars gives those of parameter expressions")
    if isinstance(loss_or_grads, (list, tuple)):
        if len(loss_or_grads) != len(params):
            raise ValueError(f"got {len(loss_or_grads)} gradients for {len(params)} parameters")
        return loss_or_grads
    return pytensor.grad(loss_or_grads, params)


def _zeros_like(param, name):
    value = param.get_value(borrow=True)
    return pytensor.shared(np.zeros(value.shape, dtype=value.dtype), name=name, shape=param.type.shape)


def sgd(loss_or_grads, params, learning_rate):
    """``param <- param - learning_rate * grad``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> list(sgd(pt.sum(w), [w], 0.5)) == [w]
    True
    """
    grads = get_or_compute_grads(loss_or_grads, params)
    updates = OrderedDict()
    for param, grad in zip(params, grads):
        lr = _const(learning_rate, param.dtype)
        updates[param] = (param - lr * grad).astype(param.dtype)
    return updates


def apply_momentum(updates, params=None, momentum=0.9):
    """Add classical momentum to ``updates``: ``v <- mu*v + (u - p); p <- p + v`` with u the given update.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(apply_momentum(sgd(pt.sum(w), [w], 0.1), [w]))
    2
    """
    params = list(updates.keys()) if params is None else params
    updates = OrderedDict(updates)
    for param in params:
        mu = _const(momentum, param.dtype)
        velocity = _zeros_like(param, f"velocity_{param.name}")
        x = mu * velocity + updates[param]
        updates[velocity] = (x - param).astype(param.dtype)
        updates[param] = x.astype(param.dtype)
    return updates


def momentum(loss_or_grads, params, learning_rate, momentum=0.9):
    """SGD with classical momentum: ``v <- mu*v - lr*g; p <- p + v``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(momentum(pt.sum(w), [w], 0.1, momentum=0.9))
    2
    """
    return apply_momentum(sgd(loss_or_grads, params, learning_rate), params, momentum)


def apply_nesterov_momentum(updates, params=None, momentum=0.9):
    """Add Nesterov momentum to ``updates``: ``v <- mu*v + (u - p); p <- p + mu*v + (u - p)``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(apply_nesterov_momentum(sgd(pt.sum(w), [w], 0.1)))
    2
    """
    params = list(updates.keys()) if params is None else params
    updates = OrderedDict(updates)
    for param in params:
        mu = _const(momentum, param.dtype)
        velocity = _zeros_like(param, f"velocity_{param.name}")
        x = mu * velocity + updates[param] - param
        updates[velocity] = x.astype(param.dtype)
        updates[param] = (mu * x + updates[param]).astype(param.dtype)
    return updates


def nesterov_momentum(loss_or_grads, params, learning_rate, momentum=0.9):
    """SGD with Nesterov momentum (Lasagne's formulation): ``v <- mu*v - lr*g; p <- p + mu*v - lr*g``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(nesterov_momentum(pt.sum(w), [w], 0.1))
    2
    """
    return apply_nesterov_momentum(sgd(loss_or_grads, params, learning_rate), params, momentum)


def adam(loss_or_grads, params, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """Adam (Kingma & Ba 2014), Lasagne's formulation.

    ``t <- t + 1``; ``m <- b1*m + (1-b1)*g``; ``v <- b2*v + (1-b2)*g**2``;
    ``p <- p - lr*sqrt(1-b2**t)/(1-b1**t) * m / (sqrt(v) + eps)``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(adam(pt.sum(w), [w]))
    4
    """
    grads = get_or_compute_grads(loss_or_grads, params)
    dtype = params[0].dtype if params else pytensor.config.floatX
    t_prev = pytensor.shared(np.asarray(0, dtype=dtype), name="adam_t")
    one = _const(1, dtype)
    t = t_prev + one
    b1, b2 = _const(beta1, dtype), _const(beta2, dtype)
    a_t = _const(learning_rate, dtype) * pt.sqrt(one - b2 ** t) / (one - b1 ** t)
    updates = OrderedDict()
    for param, g in zip(params, grads):
        m_prev = _zeros_like(param, f"adam_m_{param.name}")
        v_prev = _zeros_like(param, f"adam_v_{param.name}")
        pd = param.dtype
        m = _const(beta1, pd) * m_prev + _const(1 - beta1, pd) * g
        v = _const(beta2, pd) * v_prev + _const(1 - beta2, pd) * g ** 2
        step = a_t.astype(pd) * m / (pt.sqrt(v) + _const(epsilon, pd))
        updates[m_prev] = m.astype(pd)
        updates[v_prev] = v.astype(pd)
        updates[param] = (param - step).astype(pd)
    updates[t_prev] = t.astype(dtype)
    return updates


def _step_counter(params):
    """``(t_prev, t, dtype)``: a shared step count (0) and its next value, in the params' dtype."""
    dtype = params[0].dtype if params else pytensor.config.floatX
    t_prev = pytensor.shared(np.asarray(0, dtype=dtype), name="step_count")
    return t_prev, t_prev + _const(1, dtype), dtype


def adamax(loss_or_grads, params, learning_rate=0.002, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """AdaMax (Kingma & Ba 2014, section 7): Adam with the infinity norm.

    ``m <- b1*m + (1-b1)*g``; ``u <- max(b2*u, |g|)``; ``p <- p - lr/(1-b1**t) * m / (u + eps)``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(adamax(pt.sum(w), [w]))
    4
    """
    grads = get_or_compute_grads(loss_or_grads, params)
    t_prev, t, dtype = _step_counter(params)
    a_t = _const(learning_rate, dtype) / (_const(1, dtype) - _const(beta1, dtype) ** t)
    updates = OrderedDict()
    for param, g in zip(params, grads):
        pd = param.dtype
        m_prev = _zeros_like(param, f"adamax_m_{param.name}")
        u_prev = _zeros_like(param, f"adamax_u_{param.name}")
        m = _const(beta1, pd) * m_prev + _const(1 - beta1, pd) * g
        u = pt.maximum(_const(beta2, pd) * u_prev, pt.abs(g))
        updates[m_prev] = m.astype(pd)
        updates[u_prev] = u.astype(pd)
        updates[param] = (param - a_t.astype(pd) * m / (u + _const(epsilon, pd))).astype(pd)
    updates[t_prev] = t.astype(dtype)
    return updates


def amsgrad(loss_or_grads, params, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
    """AMSGrad (Reddi et al. 2018): Adam dividing by the running maximum of ``v``.

    ``v_hat <- max(v_hat, v)``; ``p <- p - lr*sqrt(1-b2**t)/(1-b1**t) * m / (sqrt(v_hat) + eps)``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(amsgrad(pt.sum(w), [w]))
    5
    """
    grads = get_or_compute_grads(loss_or_grads, params)
    t_prev, t, dtype = _step_counter(params)
    one = _const(1, dtype)
    a_t = _const(learning_rate, dtype) * pt.sqrt(one - _const(beta2, dtype) ** t) / (one - _const(beta1, dtype) ** t)
    updates = OrderedDict()
    for param, g in zip(params, grads):
        pd = param.dtype
        m_prev = _zeros_like(param, f"amsgrad_m_{param.name}")
        v_prev = _zeros_like(param, f"amsgrad_v_{param.name}")
        v_hat_prev = _zeros_like(param, f"amsgrad_v_hat_{param.name}")
        m = _const(beta1, pd) * m_prev + _const(1 - beta1, pd) * g
        v = _const(beta2, pd) * v_prev + _const(1 - beta2, pd) * g ** 2
        v_hat = pt.maximum(v_hat_prev, v)
        updates[m_prev] = m.astype(pd)
        updates[v_prev] = v.astype(pd)
        updates[v_hat_prev] = v_hat.astype(pd)
        updates[param] = (param - a_t.astype(pd) * m / (pt.sqrt(v_hat) + _const(epsilon, pd))).astype(pd)
    updates[t_prev] = t.astype(dtype)
    return updates


def _scaled_by_gradient_history(loss_or_grads, params, learning_rate, rho, epsilon, name):
    """Shared body of AdaGrad (``rho=None``: plain sum) and RMSProp (moving average ``rho``) of squared gradients.

    ``acc <- acc + g**2`` (or ``rho*acc + (1-rho)*g**2``); ``p <- p - lr * g / sqrt(acc + eps)``.
    """
    grads = get_or_compute_grads(loss_or_grads, params)
    updates = OrderedDict()
    for param, g in zip(params, grads):
        pd = param.dtype
        acc_prev = _zeros_like(param, f"{name}_acc_{param.name}")
        if rho is None:
            acc = acc_prev + g ** 2
        else:
            acc = _const(rho, pd) * acc_prev + _const(1 - rho, pd) * g ** 2
        updates[acc_prev] = acc.astype(pd)
        updates[param] = (param - _const(learning_rate, pd) * g / pt.sqrt(acc + _const(epsilon, pd))).astype(pd)
    return updates


def adagrad(loss_or_grads, params, learning_rate=1.0, epsilon=1e-6):
    """AdaGrad (Duchi et al. 2011): ``acc <- acc + g**2; p <- p - lr * g / sqrt(acc + eps)``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(adagrad(pt.sum(w), [w], 0.1))
    2
    """
    return _scaled_by_gradient_history(loss_or_grads, params, learning_rate, None, epsilon, "adagrad")


def rmsprop(loss_or_grads, params, learning_rate=1.0, rho=0.9, epsilon=1e-6):
    """RMSProp (Tieleman & Hinton 2012): ``acc <- rho*acc + (1-rho)*g**2; p <- p - lr * g / sqrt(acc + eps)``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(rmsprop(pt.sum(w), [w], 0.01))
    2
    """
    return _scaled_by_gradient_history(loss_or_grads, params, learning_rate, rho, epsilon, "rmsprop")


def adadelta(loss_or_grads, params, learning_rate=1.0, rho=0.95, epsilon=1e-6):
    """AdaDelta (Zeiler 2012).

    ``acc <- rho*acc + (1-rho)*g**2``; ``d = g * sqrt(acc_d + eps) / sqrt(acc + eps)``;
    ``p <- p - lr*d``; ``acc_d <- rho*acc_d + (1-rho)*d**2``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> len(adadelta(pt.sum(w), [w]))
    3
    """
    grads = get_or_compute_grads(loss_or_grads, params)
    updates = OrderedDict()
    for param, g in zip(params, grads):
        pd = param.dtype
        r, one_minus_r, eps = _const(rho, pd), _const(1 - rho, pd), _const(epsilon, pd)
        acc_prev = _zeros_like(param, f"adadelta_acc_{param.name}")
        delta_acc_prev = _zeros_like(param, f"adadelta_delta_acc_{param.name}")
        acc = r * acc_prev + one_minus_r * g ** 2
        step = g * pt.sqrt(delta_acc_prev + eps) / pt.sqrt(acc + eps)
        updates[acc_prev] = acc.astype(pd)
        updates[param] = (param - _const(learning_rate, pd) * step).astype(pd)
        updates[delta_acc_prev] = (r * delta_acc_prev + one_minus_r * step ** 2).astype(pd)
    return updates


def norm_constraint(tensor_var, max_norm, norm_axes=None, epsilon=1e-7):
    """``tensor_var`` rescaled so that each norm over ``norm_axes`` is at most ``max_norm`` (max-norm regularisation).

    ``norm_axes`` defaults to the input axes of a weight tensor: 0 for a
    dense ``W``, all but axis 0 for convolution filters (2-D to 5-D).

    Raises
    ------
    ValueError
        For another number of dimensions without ``norm_axes``.

    Example
    -------
    >>> w = pytensor.shared(np.array([[3.0, 0.0], [4.0, 0.5]], "float32"))
    >>> np.round(norm_constraint(w, 1.0).eval().astype(float), 3).tolist()
    [[0.6, 0.0], [0.8, 0.5]]
    """
    ndim = tensor_var.ndim
    if norm_axes is None:
        if ndim == 2:
            norm_axes = (0,)
        elif ndim in (3, 4, 5):
            norm_axes = tuple(range(1, ndim))
        else:
            raise ValueError(f"norm_constraint: Unsupported tensor dimensionality {ndim}; give norm_axes")
    dtype = tensor_var.dtype
    norms = pt.sqrt(pt.sum(pt.square(tensor_var), axis=tuple(norm_axes), keepdims=True))
    target = pt.clip(norms, _const(0, dtype), _const(max_norm, dtype))
    return tensor_var * (target / (_const(epsilon, dtype) + norms))


def total_norm_constraint(tensor_vars, max_norm, epsilon=1e-7, return_norm=False):
    """Rescale a list of tensors (gradients) so that their joint L2 norm is at most ``max_norm``.

    Example
    -------
    >>> w = pytensor.shared(np.ones(2, "float32"))
    >>> clipped = total_norm_constraint(pytensor.grad(pt.sum(w), [w]), max_norm=1.0)
    >>> len(clipped)
    1
    """
    tensor_vars = list(tensor_vars)
    dtype = tensor_vars[0].dtype
    norm = pt.sqrt(sum(pt.sum(pt.square(t)) for t in tensor_vars))
    target = pt.clip(norm, _const(0, dtype), _const(max_norm, dtype))
    multiplier = target / (_const(epsilon, dtype) + norm)
    scaled = [(t * multiplier).astype(t.dtype) for t in tensor_vars]
    return (scaled, norm) if return_norm else scaled
