"""How a Theano-MPI ModelClass builds its training step: ``pre_model_iter_fn`` and its updaters.

A model in Theano-MPI's idiom calls ``pre_model_iter_fn(self, k=self.size)`` from
``compile_iter_fns``. It reads the model's graph and hyper-parameters

* ``params``, ``grads``, ``weight_types`` ('W' gets weight decay ``eta`` and the
  learning rate, 'b' twice the learning rate and no decay; parameters named
  'gamma'/'beta' -- batch norm -- are stepped locally and never exchanged),
* ``lr`` (symbolic scalar) given by ``shared_lr``; ``mu``, ``eta``,
  ``use_momentum``, ``use_nesterov_momentum``,
* ``x``/``y`` given by ``shared_x_slice``/``shared_y_slice`` of sub-batch ``subb_ind``,
* ``cost``, ``error``, ``compile_train(*arg_dicts)``, ``compile_val()``,

and sets ``get_vel``, ``descent_vel``, ``train_iter_fn`` (``descent_vel()`` then
``get_vel(subb)``) and ``val_iter_fn``.

Two shapes of step:

* **two-phase** (BSP ``cdd`` with more than one worker): ``get_vel`` computes the
  worker's contribution into ``model.vels``; theanompi sums ``vels`` over the
  workers into ``model.vels2`` (one allreduce of the fused buffer);
  ``descent_vel`` -- run at the start of the next step -- applies it:
  SGD: ``vels = lr*g/k``, ``p -= vels2``; momentum: ``u = mu*u + g`` is the
  exchanged quantity, ``p -= lr * vels2 / k`` (momentum of the mean gradient).
  ``model.vels_params`` lists the parameter each entry of ``vels`` belongs to.
* **local** (one worker, BSP ``avg``, EASGD, GOSGD, ASGD): ``get_vel`` does the
  whole step and ``descent_vel`` does nothing.

Inside a session the step follows the session's sync type (the rank's
:mod:`theanompi.models.current_config`), whatever ``k`` the model passes: Theano-MPI gave
EASGD/GOSGD workers ``size=1`` for this reason, theanompi gives them their real
rank and size (their data is sharded). Outside a session ``k > 1`` means two-phase.

Nesterov momentum is the usual look-ahead form ``step = mu*u_new + g``.

Example
-------
>>> from theanompi.lib.opt import step_shape
>>> step_shape(k=2, session_sync_type="cdd"), step_shape(k=2, session_sync_type="avg")
('two-phase', 'local')
>>> step_shape(k=4, session_sync_type=None), step_shape(k=1, session_sync_type=None)
('two-phase', 'local')
"""

from __future__ import annotations

import numpy as np
import pytensor

from theanompi.core.errors import ContractError
from theanompi.models.current_config import current

#: parameter names Theano-MPI steps locally and never exchanges (batch-norm scale and shift)
LOCAL_PARAM_NAMES = ("gamma", "beta")


def step_shape(k: int, session_sync_type: str | None) -> str:
    """'two-phase' (exchange between computing and applying) or 'local' (a whole step)."""
    if session_sync_type is not None:
        return "two-phase" if session_sync_type == "cdd" else "local"
    return "two-phase" if k > 1 else "local"


def _session_sync_type():
    config = current()
    return None if config is None else (config.sync_type or "local")


def _zeros_like(param, name: str):
    value = param.get_value(borrow=True)
    return pytensor.shared(np.zeros_like(value), name=f"{name}_{param.name}")


def _param_terms(model, param, grad, weight_type):
    """(gradient with weight decay, learning-rate factor) of one parameter, as Theano-MPI weighs them."""
    if param.name in LOCAL_PARAM_NAMES:
        return grad, (1.0 if param.name == "gamma" else 2.0)
    if weight_type == "W":
        return grad + model.eta * param, 1.0
    if weight_type == "b":
        return grad, 2.0
    raise ContractError(f"weight type {weight_type!r} of parameter {param.name!r} is not 'W' or 'b' "
                        "(model.weight_types, as layers2.get_params returns them)")


def _cast(update, param):
    return update.astype(param.dtype)


def _updaters(model, momentum: bool, nesterov: bool, k: int):
    """(updates before the exchange, updates after it); fills model.vels, vels2, vels_params."""
    two_phase = step_shape(k, _session_sync_type()) == "two-phase"
    lr, mu = model.lr, getattr(model, "mu", 0.0)
    model.vels, model.vels2, model.vels_params = [], [], []
    before, after = [], []
    for param, grad, weight_type in zip(model.params, model.grads, model.weight_types):
        g, lr_factor = _param_terms(model, param, grad, weight_type)
        exchanged = two_phase and param.name not in LOCAL_PARAM_NAMES
        if momentum:
            u = _zeros_like(param, "u")
            u_new = mu * u + g
            step = mu * u_new + g if nesterov else u_new
            before.append((u, _cast(u_new, param)))
            if exchanged:
                vel = u if not nesterov else _zeros_like(param, "vel")
                if nesterov:
                    before.append((vel, _cast(step, param)))
                total = _zeros_like(param, "vel2")
                after.append((param, _cast(param - lr_factor * lr * total / float(k), param)))
            else:
                before.append((param, _cast(param - lr_factor * lr * step, param)))
        elif exchanged:
            vel, total = _zeros_like(param, "vel"), _zeros_like(param, "vel2")
            before.append((vel, _cast(lr_factor * lr * g / float(k), param)))
            after.append((param, _cast(param - total, param)))
        else:
            before.append((param, _cast(param - lr_factor * lr * g, param)))
        if exchanged:
            model.vels.append(vel)
            model.vels2.append(total)
            model.vels_params.append(param)
    return before, after


def BSP_SGD(model, k: int = 1):  # Theano-MPI's name
    """Plain SGD updates ``(before_exchange, after_exchange)`` for ``model`` (see the module doc)."""
    return _updaters(model, momentum=False, nesterov=False, k=k)


def BSP_MSGD(model, use_nesterov_momentum: bool, k: int = 1):  # Theano-MPI's name
    """Momentum SGD updates ``(before_exchange, after_exchange)``; momenta are what is exchanged."""
    return _updaters(model, momentum=True, nesterov=bool(use_nesterov_momentum), k=k)


def prepare_update_dict(model, k: int = 1):
    """The updates ``model.use_momentum`` / ``use_nesterov_momentum`` ask for."""
    if getattr(model, "use_momentum", False):
        return BSP_MSGD(model, getattr(model, "use_nesterov_momentum", False), k=k)
    return BSP_SGD(model, k=k)


def pre_model_iter_fn(model, k: int = 1, f_train: bool = True, f_val: bool = True) -> None:
    """Compile ``model``'s training (``train_iter_fn``) and validation (``val_iter_fn``) functions."""
    if f_train:
        before, after = prepare_update_dict(model, k=k)
        data_givens = [(model.x, model.shared_x_slice), (model.y, model.shared_y_slice), (model.lr, model.shared_lr)]
        # lr is given to both functions but used by one of them only (which one depends on the updater)
        get_vel_args = {"inputs": [model.subb_ind], "outputs": [model.cost, model.error], "updates": before,
                        "givens": data_givens, "on_unused_input": "ignore"}
        descent_args = {"inputs": [], "outputs": [], "updates": after, "givens": [(model.lr, model.shared_lr)],
                        "on_unused_input": "ignore"}
        model.compiled_train_fn_list = []
        model.compile_train(get_vel_args, descent_args)
        model.get_vel, model.descent_vel = model.compiled_train_fn_list[-2:]

        def train_iter_fn(subb_ind):
            model.descent_vel()  # apply the previous step's exchanged sum (nothing for a local step)
            return model.get_vel(subb_ind)

        model.train_iter_fn = train_iter_fn
    if f_val:
        model.compile_val()
        model.val_iter_fn = model.val_fn
