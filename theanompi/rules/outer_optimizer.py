"""BSP ``avg``'s outer optimizer (DiLoCo): the common parameters theta_outer and their momentum.

Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models" (arXiv:2311.08105),
Algorithm 1: workers take H local steps from theta_outer; then the workers' pseudo-gradients
Delta_i = theta_outer - theta_i are averaged, and an outer optimizer steps theta_outer with the mean as its
gradient; every worker continues from the new theta_outer. The outer optimizer is SGD with Nesterov momentum, as
PyTorch's ``torch.optim.SGD(nesterov=True)`` (what DiLoCo's implementations use) defines it, with b_0 = 0:

    b     <- mu b + Delta        (Delta: the mean pseudo-gradient)
    theta <- theta - lr (Delta + mu b)

DiLoCo's outer lr 0.7 and momentum 0.9 are BSP_OUTER_LR's and BSP_OUTER_MOMENTUM's defaults. With lr 1 and
momentum 0 the step is theta_outer - mean_i(theta_outer - theta_i) = mean_i theta_i: plain averaging.

Example
-------
>>> import numpy as np
>>> outer = OuterOptimizer(np.array([1.0, 2.0]), lr=0.5, momentum=0.9)
>>> delta = outer.pseudo_gradient(np.array([0.0, 2.0]))     # theta_outer - theta_i
>>> delta.tolist()
[1.0, 0.0]
>>> outer.step(delta)                                        # b = [1, 0]; theta -= 0.5 (1 + 0.9) -> 0.05
>>> outer.params.tolist(), outer.momentum_buffer.tolist()
([0.050000000000000044, 2.0], [1.0, 0.0])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from theanompi.backend.arrays import namespace_of, to_host
from theanompi.core.errors import ContractError


class OuterOptimizer:
    """theta_outer (``params``, a copy of the fused buffer: NumPy or CuPy) and Nesterov SGD's momentum buffer.

    The momentum buffer is made at the first step (none is kept with momentum 0).
    """

    def __init__(self, params: Any, lr: float, momentum: float):
        self.params = params
        self.lr = lr
        self.momentum = momentum
        self.momentum_buffer: Any = None

    def pseudo_gradient(self, local: Any) -> Any:
        """Delta = theta_outer - ``local``, written into ``local`` (a buffer laid out like the params); returns it."""
        namespace_of(local).subtract(self.params, local, out=local)
        return local

    def step(self, mean_delta: Any) -> None:
        """theta_outer's step with the workers' mean pseudo-gradient ``mean_delta`` (which it may overwrite)."""
        xp = namespace_of(self.params)
        dtype = self.params.dtype.type
        if self.momentum:
            if self.momentum_buffer is None:
                self.momentum_buffer = xp.zeros_like(self.params)
            self.momentum_buffer *= dtype(self.momentum)
            self.momentum_buffer += mean_delta
            mean_delta += dtype(self.momentum) * self.momentum_buffer  # Nesterov's look-ahead
        self.params -= dtype(self.lr) * mean_delta

    def state(self) -> dict[str, np.ndarray]:
        """theta_outer and the momentum buffer as host arrays (what a checkpoint keeps)."""
        state = {"outer_params": to_host(self.params).copy()}
        if self.momentum_buffer is not None:
            state["outer_momentum"] = to_host(self.momentum_buffer).copy()
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        """Take back :meth:`state` (a checkpoint's); ContractError if it does not fit the parameters."""
        xp = namespace_of(self.params)
        for key in ("outer_params", "outer_momentum"):
            if key in state and np.size(state[key]) != self.params.size:
                raise ContractError(f"the checkpoint's {key} has {np.size(state[key])} values, the model's "
                                    f"parameters {self.params.size}")
        if "outer_params" in state:
            self.params[...] = xp.asarray(np.asarray(state["outer_params"], dtype=self.params.dtype))
        if "outer_momentum" in state:
            self.momentum_buffer = xp.array(np.asarray(state["outer_momentum"], dtype=self.params.dtype))
