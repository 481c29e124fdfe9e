"""Recurrent layers: :class:`LSTMLayer` (with :class:`Gate` specifications), on ``pytensor.scan``.

Input is (batch, time, features) (trailing dimensions beyond 3 are
flattened); the output is (batch, time, num_units), or (batch, num_units) with
``only_return_final=True``. An optional mask layer (batch, time) of 0/1 marks
valid steps of variable-length sequences: at masked steps the hidden and cell
states are carried over unchanged.

Example
-------
>>> from theanompi.models.layers import InputLayer, LSTMLayer
>>> l = LSTMLayer(InputLayer((None, 20, 8)), num_units=16, only_return_final=True)
>>> l.output_shape
(None, 16)
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.gradient import grad_clip

from theanompi.models.layers import init, nonlinearities
from theanompi.models.layers.base import Layer, MergeLayer

__all__ = ["Gate", "LSTMLayer"]

GATES = ("ingate", "forgetgate", "cell", "outgate")


class Gate:
    """Parameter initializers and nonlinearity of one LSTM gate (Lasagne's ``Gate``).

    Parameters
    ----------
    W_in, W_hid : initializer
        Input-to-gate (num_inputs, num_units) and hidden-to-gate (num_units, num_units) weights.
    W_cell : initializer or None
        Peephole weights (num_units,); None: no peephole for this gate.
    b : initializer
        Bias (num_units,).
    nonlinearity : callable or None

    Example
    -------
    >>> cell = Gate(W_cell=None, nonlinearity=nonlinearities.tanh)
    >>> cell.W_cell is None
    True
    """

    def __init__(self, W_in=init.Normal(0.1), W_hid=init.Normal(0.1), W_cell=init.Normal(0.1),
                 b=init.Constant(0.0), nonlinearity=nonlinearities.sigmoid):
        self.W_in, self.W_hid, self.W_cell, self.b = W_in, W_hid, W_cell, b
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity


class LSTMLayer(MergeLayer):
    """Long short-term memory layer (Graves 2013 formulation, as in Lasagne).

    Per step, with ``x_t`` the input and peepholes ``w_c*``::

        i_t = σ_i(x_t W_xi + h_{t-1} W_hi + w_ci ⊙ c_{t-1} + b_i)
        f_t = σ_f(x_t W_xf + h_{t-1} W_hf + w_cf ⊙ c_{t-1} + b_f)
        c_t = f_t ⊙ c_{t-1} + i_t ⊙ σ_c(x_t W_xc + h_{t-1} W_hc + b_c)
        o_t = σ_o(x_t W_xo + h_{t-1} W_ho + w_co ⊙ c_t + b_o)
        h_t = o_t ⊙ nonlinearity(c_t)

    Parameters
    ----------
    incoming : Layer or tuple
        (batch, time, features...); the feature dimensions must be known.
    num_units : int
    ingate, forgetgate, cell, outgate : Gate
    nonlinearity : callable or None
        Applied to the cell before the output gate (tanh).
    cell_init, hid_init : initializer, array or shared variable
        Initial states, shape (1, num_units); trainable only with ``learn_init``.
    backwards : bool
        Process the sequence from the end; the output keeps the input's time order.
    learn_init : bool
    peepholes : bool
    gradient_steps : int
        Truncated back-propagation through time (-1: full).
    grad_clipping : float
        If > 0, clip the gradient flowing into the gates to [-grad_clipping, grad_clipping]
        (the forward pass is unchanged).
    unroll_scan : bool
        Unroll the time loop in Python (needs a known sequence length) instead of ``scan``.
    mask_input : Layer or tuple, optional
        (batch, time) mask: 1 for valid steps, 0 for padding.
    only_return_final : bool
        Return only the last computed hidden state (batch, num_units).

    Example
    -------
    >>> l = LSTMLayer((None, 5, 3), 4, peepholes=False)
    >>> sorted(p.name for p in l.get_params(trainable=True))[:3]
    ['W_hid_to_cell', 'W_hid_to_forgetgate', 'W_hid_to_ingate']
    """

    def __init__(self, incoming, num_units, ingate=Gate(), forgetgate=Gate(),
                 cell=Gate(W_cell=None, nonlinearity=nonlinearities.tanh), outgate=Gate(),
                 nonlinearity=nonlinearities.tanh, cell_init=init.Constant(0.0), hid_init=init.Constant(0.0),
                 backwards=False, learn_init=False, peepholes=True, gradient_steps=-1, grad_clipping=0,
                 unroll_scan=False, precompute_input=True, mask_input=None, only_return_final=False, **kwargs):
        incomings = [incoming] + ([] if mask_input is None else [mask_input])
        super().__init__(incomings, **kwargs)
        self.has_mask = mask_input is not None
        input_shape = self.input_shapes[0]
        if len(input_shape) < 3:
            raise ValueError(f"LSTMLayer: input must be (batch, time, features...), got shape {input_shape}")
        if any(s is None for s in input_shape[2:]):
            raise ValueError(f"LSTMLayer: the feature dimensions must be known, got input shape {input_shape}")
        if self.has_mask and len(self.input_shapes[1]) != 2:
            raise ValueError(f"LSTMLayer: mask_input must be (batch, time), got shape {self.input_shapes[1]}")
        if isinstance(num_units, bool) or not isinstance(num_units, numbers.Integral) or num_units < 1:
            raise ValueError(f"LSTMLayer: num_units must be a positive int, got {num_units!r}")
        if unroll_scan and input_shape[1] is None:
            raise ValueError(f"LSTMLayer: unroll_scan=True needs a known sequence length, got input shape "
                             f"{input_shape}")
        if not grad_clipping >= 0:
            raise ValueError(f"LSTMLayer: grad_clipping must be >= 0, got {grad_clipping!r}")
        self.num_units = int(num_units)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self.backwards, self.learn_init, self.peepholes = bool(backwards), bool(learn_init), bool(peepholes)
        self.gradient_steps, self.grad_clipping = int(gradient_steps), float(grad_clipping)
        self.unroll_scan, self.precompute_input = bool(unroll_scan), bool(precompute_input)
        self.only_return_final = bool(only_return_final)
        num_inputs = int(np.prod(input_shape[2:]))
        n = self.num_units
        self.gate_nonlinearities = {}
        for gate_name, gate in zip(GATES, (ingate, forgetgate, cell, outgate)):
            setattr(self, f"W_in_to_{gate_name}", self.add_param(gate.W_in, (num_inputs, n), f"W_in_to_{gate_name}"))
            setattr(self, f"W_hid_to_{gate_name}", self.add_param(gate.W_hid, (n, n), f"W_hid_to_{gate_name}"))
            setattr(self, f"b_{gate_name}", self.add_param(gate.b, (n,), f"b_{gate_name}", regularizable=False))
            self.gate_nonlinearities[gate_name] = gate.nonlinearity
        if self.peepholes:
            for gate_name, gate in (("ingate", ingate), ("forgetgate", forgetgate), ("outgate", outgate)):
                if gate.W_cell is None:
                    raise ValueError(f"LSTMLayer: peepholes=True needs W_cell for the {gate_name}, got None")
                setattr(self, f"W_cell_to_{gate_name}",
                        self.add_param(gate.W_cell, (n,), f"W_cell_to_{gate_name}"))
        for state, spec in (("cell_init", cell_init), ("hid_init", hid_init)):
            if isinstance(spec, Layer):
                raise ValueError(f"LSTMLayer: {state} given as a layer is not supported; pass an initializer, "
                                 "an array or a shared variable")
            setattr(self, state, self.add_param(spec, (1, n), state, trainable=self.learn_init,
                                                regularizable=False))

    def get_output_shape_for(self, input_shapes):
        shape = input_shapes[0]
        if self.only_return_final:
            return (shape[0], self.num_units)
        return (shape[0], shape[1], self.num_units)

    def get_output_for(self, inputs, **kwargs):
        input = inputs[0]
        mask = inputs[1] if self.has_mask else None
        if input.ndim > 3:
            input = input.flatten(3)
        dtype = input.dtype
        input = input.dimshuffle(1, 0, 2)  # (time, batch, features)
        num_batch = input.shape[1]
        W_in = pt.concatenate([getattr(self, f"W_in_to_{g}") for g in GATES], axis=1)
        W_hid = pt.concatenate([getattr(self, f"W_hid_to_{g}") for g in GATES], axis=1)
        b = pt.concatenate([getattr(self, f"b_{g}") for g in GATES], axis=0)
        if self.precompute_input:
            input = pt.dot(input, W_in) + b
        peeps = [getattr(self, f"W_cell_to_{g}") for g in ("ingate", "forgetgate", "outgate")] if self.peepholes else []

        sequences = [input]
        if mask is not None:
            sequences.append(mask.dimshuffle(1, 0, "x"))
        step_fun = self._step_function(len(peeps), dtype, masked=mask is not None)
        ones = pt.ones((num_batch, 1), dtype=dtype)
        cell_init = pt.dot(ones, self.cell_init)
        hid_init = pt.dot(ones, self.hid_init)
        non_seqs = [W_hid] + peeps
        if not self.precompute_input:
            non_seqs += [W_in, b]

        hid_out = self._run_steps(step_fun, sequences, cell_init, hid_init, non_seqs)
        if self.only_return_final:
            return hid_out[-1]
        hid_out = hid_out.dimshuffle(1, 0, 2)
        if self.backwards:
            hid_out = hid_out[:, ::-1]
        return hid_out

    def _step_function(self, n_peeps: int, dtype, masked: bool):
        """One time step, ``(input_n[, mask_n], cell_prev, hid_prev, W_hid, *peepholes[, W_in, b]) -> [cell, hid]``
        (a masked step keeps the previous state where the mask is 0)."""
        n = self.num_units
        nl = self.gate_nonlinearities
        clip = self.grad_clipping

        def step(input_n, cell_prev, hid_prev, W_hid, *args):
            # Parameters come in as arguments (scan's non_sequences), never from the closure.
            w_peep = args[:n_peeps]
            if not self.precompute_input:
                W_in_, b_ = args[n_peeps:n_peeps + 2]
                input_n = pt.dot(input_n, W_in_) + b_
            gates = input_n + pt.dot(hid_prev, W_hid)
            if clip:
                gates = grad_clip(gates, np.asarray(-clip, dtype), np.asarray(clip, dtype))
            ingate, forgetgate, cell_input, outgate = (gates[:, k * n:(k + 1) * n] for k in range(4))
            if self.peepholes:
                ingate = ingate + cell_prev * w_peep[0]
                forgetgate = forgetgate + cell_prev * w_peep[1]
            ingate = nl["ingate"](ingate)
            forgetgate = nl["forgetgate"](forgetgate)
            cell_input = nl["cell"](cell_input)
            cell = forgetgate * cell_prev + ingate * cell_input
            if self.peepholes:
                outgate = outgate + cell * w_peep[2]
            outgate = nl["outgate"](outgate)
            hid = outgate * self.nonlinearity(cell)
            return [cell, hid]

        def step_masked(input_n, mask_n, cell_prev, hid_prev, *args):
            cell, hid = step(input_n, cell_prev, hid_prev, *args)
            keep = pt.neq(mask_n, 0)
            return [pt.switch(keep, cell, cell_prev), pt.switch(keep, hid, hid_prev)]

        return step_masked if masked else step

    def _run_steps(self, step_fun, sequences, cell_init, hid_init, non_seqs):
        """The hidden states of every step, time first: a Python loop (``unroll_scan``) or one scan."""
        if self.unroll_scan:
            steps = range(self.input_shapes[0][1])
            if self.backwards:
                steps = reversed(steps)
            cell, hid = cell_init, hid_init
            hids = []
            for t in steps:
                cell, hid = step_fun(*[s[t] for s in sequences], cell, hid, *non_seqs)
                hids.append(hid)
            return pt.stack(hids)
        _, hid_out = pytensor.scan(
            fn=step_fun, sequences=sequences, outputs_info=[cell_init, hid_init], go_backwards=self.backwards,
            truncate_gradient=self.gradient_steps, non_sequences=non_seqs, strict=True, return_updates=False,
        )
        return hid_out
