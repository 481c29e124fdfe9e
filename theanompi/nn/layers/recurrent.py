"""Recurrent layers on ``pytensor.scan`` (Lasagne's ``lasagne.layers.recurrent``).

:class:`CustomRecurrentLayer` runs any input-to-hidden and hidden-to-hidden
networks over time; :class:`RecurrentLayer` is its dense ("vanilla") case;
:class:`LSTMLayer` and :class:`GRULayer` take their gates' parameters from
:class:`Gate` specifications.

Input is (batch, time, features...); the output is (batch, time, hidden...),
or (batch, hidden...) with ``only_return_final=True``. Common arguments:

* ``mask_input``: a (batch, time) layer of 0/1 marking valid steps of
  variable-length sequences; at masked steps the state is carried over.
* ``hid_init`` (and the LSTM's ``cell_init``): the initial state, an
  initializer, array or shared variable of shape (1, hidden...) (trainable
  with ``learn_init=True``) or a layer giving (batch, hidden...).
* ``backwards``: process the sequence from its end (the output keeps the
  input's time order); ``gradient_steps``: truncated back-propagation through
  time (-1: full); ``grad_clipping``: clip the gradient flowing into the
  pre-activations (the forward pass is unchanged); ``unroll_scan``: a Python
  loop instead of ``scan`` (needs a known sequence length and
  ``gradient_steps=-1``); ``precompute_input``: apply the input weights to
  all steps at once before the loop.

Example
-------
>>> from theanompi.nn import InputLayer, LSTMLayer, GRULayer
>>> l_in = InputLayer((None, 20, 8))
>>> LSTMLayer(l_in, num_units=16, only_return_final=True).output_shape
(None, 16)
>>> GRULayer(l_in, num_units=4).output_shape
(None, 20, 4)
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.gradient import grad_clip

from theanompi.nn import init, nonlinearities
from theanompi.nn.layers.base import Layer, MergeLayer
from theanompi.nn.layers.dense import DenseLayer
from theanompi.nn.layers.helper import get_all_layers, get_all_params, get_output
from theanompi.nn.layers.input import InputLayer
from theanompi.nn.utils import unique, unroll_scan

__all__ = ["CustomRecurrentLayer", "GRULayer", "Gate", "LSTMLayer", "RecurrentLayer"]

#: RecurrentLayer's default weights (Lasagne's): uniform in [-0.01, 0.01].
_UNIFORM = init.Uniform()


class Gate:
    """Parameter initializers and nonlinearity of one gate of an :class:`LSTMLayer` or :class:`GRULayer`.

    Parameters
    ----------
    W_in, W_hid : initializer
        Input-to-gate (num_inputs, num_units) and hidden-to-gate (num_units, num_units) weights.
    W_cell : initializer or None
        LSTM peephole weights (num_units,); None: no peephole for this gate (the GRU ignores it).
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


def _check_num_units(num_units, who):
    if isinstance(num_units, bool) or not isinstance(num_units, numbers.Integral) or num_units < 1:
        raise ValueError(f"{who}: num_units must be a positive int, got {num_units!r}")
    return int(num_units)


def _clip(x, bound):
    """``x`` whose gradient is clipped to [-bound, bound] (``x`` itself where ``bound`` is 0)."""
    if not bound:
        return x
    return grad_clip(x, np.asarray(-bound, x.dtype), np.asarray(bound, x.dtype))


def _batch_copies(state, num_batch):
    """A (1, ...) initial state repeated ``num_batch`` times along its first axis."""
    return pt.ones((num_batch,) + (1,) * (state.ndim - 1), dtype=state.dtype) * state


class _RecurrentBase(MergeLayer):
    """What every recurrent layer shares: its incomings (input, mask, initial-state layers), the checks, the loop.

    ``states`` names the initial states (``"hid_init"``, ``"cell_init"``):
    one given as a layer becomes an incoming (its index in
    ``<name>_incoming_index``), any other spec a parameter made by
    :meth:`_add_initial_state` once the subclass knows the state's shape.
    """

    def __init__(self, incoming, states, mask_input, backwards, learn_init, gradient_steps, grad_clipping,
                 unroll_scan, precompute_input, only_return_final, **kwargs):
        incomings = [incoming]
        self.mask_incoming_index = -1
        if mask_input is not None:
            incomings.append(mask_input)
            self.mask_incoming_index = len(incomings) - 1
        for name, spec in states.items():
            setattr(self, f"{name}_incoming_index", -1)
            if isinstance(spec, Layer):
                incomings.append(spec)
                setattr(self, f"{name}_incoming_index", len(incomings) - 1)
        super().__init__(incomings, **kwargs)
        who = type(self).__name__
        input_shape = self.input_shapes[0]
        if len(input_shape) < 3:
            raise ValueError(f"{who}: input must be (batch, time, features...), got shape {input_shape}")
        if mask_input is not None and len(self.input_shapes[self.mask_incoming_index]) != 2:
            raise ValueError(f"{who}: mask_input must be (batch, time), got shape "
                             f"{self.input_shapes[self.mask_incoming_index]}")
        if unroll_scan and gradient_steps != -1:
            raise ValueError(f"{who}: unroll_scan=True back-propagates through the whole sequence; gradient_steps "
                             f"must be -1, got {gradient_steps!r}")
        if unroll_scan and input_shape[1] is None:
            raise ValueError(f"{who}: unroll_scan=True needs a known sequence length, got input shape {input_shape}")
        if not grad_clipping >= 0:
            raise ValueError(f"{who}: grad_clipping must be >= 0, got {grad_clipping!r}")
        self.backwards, self.learn_init = bool(backwards), bool(learn_init)
        self.gradient_steps, self.grad_clipping = int(gradient_steps), float(grad_clipping)
        self.unroll_scan, self.precompute_input = bool(unroll_scan), bool(precompute_input)
        self.only_return_final = bool(only_return_final)

    def _add_initial_state(self, name, spec, state_shape):
        """``self.<name>``: the layer ``spec``, or a (1, *state_shape) parameter (trainable with ``learn_init``)."""
        if isinstance(spec, Layer):
            setattr(self, name, spec)
        else:
            setattr(self, name, self.add_param(spec, (1, *state_shape), name, trainable=self.learn_init,
                                               regularizable=False))

    def _initial_state(self, name, inputs, num_batch):
        """The initial state for a batch: the layer's output, or the parameter repeated over the batch."""
        index = getattr(self, f"{name}_incoming_index")
        if index > 0:
            return inputs[index]
        return _batch_copies(getattr(self, name), num_batch)

    def _mask(self, inputs, state_ndim):
        """The mask, time first, broadcastable over the state's trailing axes; None without a mask."""
        if self.mask_incoming_index < 0:
            return None
        mask = inputs[self.mask_incoming_index]
        return mask.dimshuffle(1, 0, *(["x"] * (state_ndim - 1)))

    def _loop(self, step, input, mask, initial_states, non_sequences):
        """Run ``step(input_n, *states, *non_sequences) -> states`` over time (masked steps keep the states).

        Returns the state sequences, time first, in the order the steps ran.
        """
        sequences = [input] if mask is None else [input, mask]
        n_states = len(initial_states)

        def masked_step(input_n, mask_n, *args):
            previous = args[:n_states]
            new = step(input_n, *args)
            keep = pt.neq(mask_n, 0)
            return [pt.switch(keep, n, p) for n, p in zip(new, previous)]

        step_fun = step if mask is None else masked_step
        if self.unroll_scan:
            return unroll_scan(step_fun, sequences, list(initial_states), list(non_sequences),
                               n_steps=self.input_shapes[0][1], go_backwards=self.backwards)
        outputs = pytensor.scan(fn=step_fun, sequences=sequences, outputs_info=list(initial_states),
                                non_sequences=list(non_sequences), go_backwards=self.backwards,
                                truncate_gradient=self.gradient_steps, strict=True, return_updates=False)
        return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]

    def _finish(self, hid_out):
        """The layer's output from the hidden states (time first, in step order)."""
        if self.only_return_final:
            return hid_out[-1]
        hid_out = hid_out.dimshuffle(1, 0, *range(2, hid_out.ndim))
        return hid_out[:, ::-1] if self.backwards else hid_out


class CustomRecurrentLayer(_RecurrentBase):
    """A recurrent layer of two networks: ``h_t = nonlinearity(input_to_hidden(x_t) + hidden_to_hidden(h_{t-1}))``.

    Parameters
    ----------
    incoming : Layer or tuple
        (batch, time, features...).
    input_to_hidden, hidden_to_hidden : Layer
        Networks with exactly one InputLayer each: the first takes one step's
        input, (batch, features...) (or all steps at once, (batch*time,
        features...), with ``precompute_input``); the second the previous
        hidden state. Their outputs have the same shape, which is the
        hidden state's. Their parameters are this layer's.
    nonlinearity : callable or None
    hid_init, backwards, learn_init, gradient_steps, grad_clipping, unroll_scan, precompute_input, mask_input,
    only_return_final
        See the module's description.

    Raises
    ------
    ValueError
        For networks with other than one InputLayer each or shapes that do not fit together.

    Example
    -------
    >>> from theanompi.nn import InputLayer, DenseLayer
    >>> in_to_hid = DenseLayer(InputLayer((None, 3)), 5, nonlinearity=None)
    >>> hid_to_hid = DenseLayer(InputLayer((None, 5)), 5, nonlinearity=None, b=None)
    >>> CustomRecurrentLayer((None, 7, 3), in_to_hid, hid_to_hid).output_shape
    (None, 7, 5)
    """

    def __init__(self, incoming, input_to_hidden, hidden_to_hidden, nonlinearity=nonlinearities.rectify,
                 hid_init=init.Constant(0.0), backwards=False, learn_init=False, gradient_steps=-1, grad_clipping=0,
                 unroll_scan=False, precompute_input=True, mask_input=None, only_return_final=False, **kwargs):
        super().__init__(incoming, {"hid_init": hid_init}, mask_input, backwards, learn_init, gradient_steps,
                         grad_clipping, unroll_scan, precompute_input, only_return_final, **kwargs)
        hid_in_layer = self._only_input_layer(hidden_to_hidden, "hidden_to_hidden")
        self._only_input_layer(input_to_hidden, "input_to_hidden")
        self.input_to_hidden, self.hidden_to_hidden = input_to_hidden, hidden_to_hidden
        self._check_shapes(input_to_hidden.output_shape, hidden_to_hidden.output_shape, hid_in_layer.output_shape)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self._add_initial_state("hid_init", hid_init, tuple(hidden_to_hidden.output_shape[1:]))

    @staticmethod
    def _only_input_layer(network, what):
        inputs = [layer for layer in get_all_layers(network) if isinstance(layer, InputLayer)]
        if len(inputs) != 1:
            raise ValueError(f"CustomRecurrentLayer: {what} must have exactly one InputLayer, it has {len(inputs)}")
        return inputs[0]

    def _check_shapes(self, in_to_hid, hid_to_hid, hid_to_hid_input):
        input_shape = self.input_shapes[0]

        def agree(a, b):
            return all(s is None or t is None or s == t for s, t in zip(a, b))

        if (self.precompute_input and None not in (in_to_hid[0], input_shape[0], input_shape[1])
                and in_to_hid[0] != input_shape[0] * input_shape[1]):
            raise ValueError(f"CustomRecurrentLayer: with precompute_input=True, input_to_hidden.output_shape[0] "
                             f"must be None or batch_size*sequence_length = {input_shape[0] * input_shape[1]}, got "
                             f"{in_to_hid[0]}")
        if not self.precompute_input and not agree(in_to_hid[:1], hid_to_hid[:1]):
            raise ValueError(f"CustomRecurrentLayer: with precompute_input=False, input_to_hidden.output_shape[0] "
                             f"must equal hidden_to_hidden.output_shape[0], got {in_to_hid[0]} and {hid_to_hid[0]}")
        if not agree(in_to_hid[1:], hid_to_hid[1:]):
            raise ValueError(f"CustomRecurrentLayer: input_to_hidden and hidden_to_hidden must give the same shape "
                             f"after the first axis, got {in_to_hid} and {hid_to_hid}")
        if not agree(in_to_hid[1:], hid_to_hid_input[1:]):
            raise ValueError(f"CustomRecurrentLayer: input_to_hidden's output shape {in_to_hid} must be "
                             f"hidden_to_hidden's input shape {hid_to_hid_input} after the first axis")

    def get_params(self, unwrap_shared=True, **tags):
        own = super().get_params(unwrap_shared=unwrap_shared, **tags)
        children = [get_all_params(net, unwrap_shared=unwrap_shared, **tags)
                    for net in (self.input_to_hidden, self.hidden_to_hidden)]
        return unique(own + children[0] + children[1])

    def get_output_shape_for(self, input_shapes):
        shape = input_shapes[0]
        hidden = tuple(self.hidden_to_hidden.output_shape[1:])
        return (shape[0], *hidden) if self.only_return_final else (shape[0], shape[1], *hidden)

    def get_output_for(self, inputs, **kwargs):
        input = inputs[0].dimshuffle(1, 0, *range(2, inputs[0].ndim))  # (time, batch, features...)
        seq_len, num_batch = input.shape[0], input.shape[1]
        if self.precompute_input:
            flat = input.reshape((seq_len * num_batch, *(input.shape[k] for k in range(2, input.ndim))))
            out = get_output(self.input_to_hidden, flat, **kwargs)
            input = out.reshape((seq_len, num_batch, *(out.shape[k] for k in range(1, out.ndim))))
        non_seqs = get_all_params(self.hidden_to_hidden)
        if not self.precompute_input:
            non_seqs += get_all_params(self.input_to_hidden)

        def step(input_n, hid_previous, *params):
            hid_pre = get_output(self.hidden_to_hidden, hid_previous, **kwargs)
            if self.precompute_input:
                hid_pre = hid_pre + input_n
            else:
                hid_pre = hid_pre + get_output(self.input_to_hidden, input_n, **kwargs)
            return [self.nonlinearity(_clip(hid_pre, self.grad_clipping))]

        hid_init = self._initial_state("hid_init", inputs, num_batch)
        [hid_out] = self._loop(step, input, self._mask(inputs, hid_init.ndim), [hid_init], unique(non_seqs))
        return self._finish(hid_out)


class RecurrentLayer(CustomRecurrentLayer):
    """The dense ("vanilla") recurrent layer: ``h_t = nonlinearity(x_t W_in_to_hid + h_{t-1} W_hid_to_hid + b)``.

    Parameters
    ----------
    incoming : Layer or tuple
        (batch, time, features...); the feature dimensions must be known.
    num_units : int
    W_in_to_hid, W_hid_to_hid, b : initializer, array or shared variable
        ``b`` may be None (no bias).
    nonlinearity : callable or None
    hid_init, backwards, learn_init, gradient_steps, grad_clipping, unroll_scan, precompute_input, mask_input,
    only_return_final
        See the module's description.

    Example
    -------
    >>> layer = RecurrentLayer((None, 7, 3), 5, name="rnn")
    >>> layer.output_shape, layer.W_in_to_hid.name, layer.b.name
    ((None, 7, 5), 'rnn.input_to_hidden.W', 'rnn.input_to_hidden.b')
    """

    def __init__(self, incoming, num_units, W_in_to_hid=_UNIFORM, W_hid_to_hid=_UNIFORM,
                 b=init.Constant(0.0), nonlinearity=nonlinearities.rectify, hid_init=init.Constant(0.0),
                 backwards=False, learn_init=False, gradient_steps=-1, grad_clipping=0, unroll_scan=False,
                 precompute_input=True, mask_input=None, only_return_final=False, **kwargs):
        num_units = _check_num_units(num_units, "RecurrentLayer")
        input_shape = incoming if isinstance(incoming, tuple) else incoming.output_shape
        prefix = f"{kwargs['name']}." if kwargs.get("name") else ""
        in_to_hid = DenseLayer(InputLayer((None, *input_shape[2:])), num_units, W=W_in_to_hid, b=b,
                               nonlinearity=None, name=f"{prefix}input_to_hidden")
        hid_to_hid = DenseLayer(InputLayer((None, num_units)), num_units, W=W_hid_to_hid, b=None,
                                nonlinearity=None, name=f"{prefix}hidden_to_hidden")
        self.W_in_to_hid, self.W_hid_to_hid, self.b = in_to_hid.W, hid_to_hid.W, in_to_hid.b
        super().__init__(incoming, in_to_hid, hid_to_hid, nonlinearity=nonlinearity, hid_init=hid_init,
                         backwards=backwards, learn_init=learn_init, gradient_steps=gradient_steps,
                         grad_clipping=grad_clipping, unroll_scan=unroll_scan, precompute_input=precompute_input,
                         mask_input=mask_input, only_return_final=only_return_final, **kwargs)


class _GatedLayer(_RecurrentBase):
    """LSTM and GRU: gates with input, hidden and bias parameters named ``W_in_to_<gate>``, ``W_hid_to_<gate>``,
    ``b_<gate>``, computed together as one matrix product per step."""

    GATES: tuple[str, ...] = ()

    def __init__(self, incoming, num_units, gates, states, **kwargs):
        super().__init__(incoming, states, **kwargs)
        who = type(self).__name__
        input_shape = self.input_shapes[0]
        if any(s is None for s in input_shape[2:]):
            raise ValueError(f"{who}: the feature dimensions must be known, got input shape {input_shape}")
        self.num_units = n = _check_num_units(num_units, who)
        num_inputs = int(np.prod(input_shape[2:]))
        self.gate_nonlinearities = {}
        for gate_name, gate in zip(self.GATES, gates):
            setattr(self, f"W_in_to_{gate_name}", self.add_param(gate.W_in, (num_inputs, n), f"W_in_to_{gate_name}"))
            setattr(self, f"W_hid_to_{gate_name}", self.add_param(gate.W_hid, (n, n), f"W_hid_to_{gate_name}"))
            setattr(self, f"b_{gate_name}", self.add_param(gate.b, (n,), f"b_{gate_name}", regularizable=False))
            self.gate_nonlinearities[gate_name] = gate.nonlinearity

    def _stacked(self, kind, axis):
        return pt.concatenate([getattr(self, f"{kind}{g}") for g in self.GATES], axis=axis)

    def _gate_slices(self, x):
        n = self.num_units
        return [x[:, k * n:(k + 1) * n] for k in range(len(self.GATES))]

    def get_output_shape_for(self, input_shapes):
        shape = input_shapes[0]
        return (shape[0], self.num_units) if self.only_return_final else (shape[0], shape[1], self.num_units)

    def _prepare_input(self, input):
        """(time, batch, features) input, with the input weights and biases applied where precomputed."""
        if input.ndim > 3:
            input = input.flatten(3)
        input = input.dimshuffle(1, 0, 2)
        if self.precompute_input:
            input = pt.dot(input, self._stacked("W_in_to_", 1)) + self._stacked("b_", 0)
        return input

    def _input_params(self):
        """The non-sequences a step needs to apply the input weights itself (none where precomputed)."""
        return [] if self.precompute_input else [self._stacked("W_in_to_", 1), self._stacked("b_", 0)]


class LSTMLayer(_GatedLayer):
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
    cell_init, hid_init : initializer, array, shared variable or Layer
        Initial states: (1, num_units) parameters (trainable only with
        ``learn_init``), or layers giving (batch, num_units).
    peepholes : bool
    backwards, learn_init, gradient_steps, grad_clipping, unroll_scan, precompute_input, mask_input,
    only_return_final
        See the module's description.

    Example
    -------
    >>> l = LSTMLayer((None, 5, 3), 4, peepholes=False)
    >>> sorted(p.name for p in l.get_params(trainable=True))[:3]
    ['W_hid_to_cell', 'W_hid_to_forgetgate', 'W_hid_to_ingate']
    """

    GATES = ("ingate", "forgetgate", "cell", "outgate")

    def __init__(self, incoming, num_units, ingate=Gate(), forgetgate=Gate(),
                 cell=Gate(W_cell=None, nonlinearity=nonlinearities.tanh), outgate=Gate(),
                 nonlinearity=nonlinearities.tanh, cell_init=init.Constant(0.0), hid_init=init.Constant(0.0),
                 backwards=False, learn_init=False, peepholes=True, gradient_steps=-1, grad_clipping=0,
                 unroll_scan=False, precompute_input=True, mask_input=None, only_return_final=False, **kwargs):
        super().__init__(incoming, num_units, (ingate, forgetgate, cell, outgate),
                         {"hid_init": hid_init, "cell_init": cell_init}, mask_input=mask_input, backwards=backwards,
                         learn_init=learn_init, gradient_steps=gradient_steps, grad_clipping=grad_clipping,
                         unroll_scan=unroll_scan, precompute_input=precompute_input,
                         only_return_final=only_return_final, **kwargs)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self.peepholes = bool(peepholes)
        if self.peepholes:
            for gate_name, gate in (("ingate", ingate), ("forgetgate", forgetgate), ("outgate", outgate)):
                if gate.W_cell is None:
                    raise ValueError(f"LSTMLayer: peepholes=True needs W_cell for the {gate_name}, got None")
                setattr(self, f"W_cell_to_{gate_name}",
                        self.add_param(gate.W_cell, (self.num_units,), f"W_cell_to_{gate_name}"))
        self._add_initial_state("cell_init", cell_init, (self.num_units,))
        self._add_initial_state("hid_init", hid_init, (self.num_units,))

    def get_output_for(self, inputs, **kwargs):
        input = self._prepare_input(inputs[0])
        num_batch = input.shape[1]
        peeps = ([getattr(self, f"W_cell_to_{g}") for g in ("ingate", "forgetgate", "outgate")]
                 if self.peepholes else [])
        n_peeps, nl = len(peeps), self.gate_nonlinearities

        def step(input_n, cell_prev, hid_prev, W_hid, *args):
            # Parameters come in as arguments (scan's non_sequences), never from the closure.
            w_peep = args[:n_peeps]
            if not self.precompute_input:
                W_in, b = args[n_peeps:n_peeps + 2]
                input_n = pt.dot(input_n, W_in) + b
            gates = _clip(input_n + pt.dot(hid_prev, W_hid), self.grad_clipping)
            ingate, forgetgate, cell_input, outgate = self._gate_slices(gates)
            if self.peepholes:
                ingate = ingate + cell_prev * w_peep[0]
                forgetgate = forgetgate + cell_prev * w_peep[1]
            cell = nl["forgetgate"](forgetgate) * cell_prev + nl["ingate"](ingate) * nl["cell"](cell_input)
            if self.peepholes:
                outgate = outgate + cell * w_peep[2]
            return [cell, nl["outgate"](outgate) * self.nonlinearity(cell)]

        initial = [self._initial_state(name, inputs, num_batch) for name in ("cell_init", "hid_init")]
        non_seqs = [self._stacked("W_hid_to_", 1), *peeps, *self._input_params()]
        _, hid_out = self._loop(step, input, self._mask(inputs, 2), initial, non_seqs)
        return self._finish(hid_out)


class GRULayer(_GatedLayer):
    """Gated recurrent unit layer (Cho et al. 2014, as in Lasagne).

    Per step::

        r_t = σ_r(x_t W_xr + h_{t-1} W_hr + b_r)
        u_t = σ_u(x_t W_xu + h_{t-1} W_hu + b_u)
        c_t = σ_c(x_t W_xc + r_t ⊙ (h_{t-1} W_hc) + b_c)
        h_t = (1 - u_t) ⊙ h_{t-1} + u_t ⊙ c_t

    Parameters
    ----------
    incoming : Layer or tuple
        (batch, time, features...); the feature dimensions must be known.
    num_units : int
    resetgate, updategate, hidden_update : Gate
        ``W_cell`` is ignored.
    hid_init, backwards, learn_init, gradient_steps, grad_clipping, unroll_scan, precompute_input, mask_input,
    only_return_final
        See the module's description.

    Example
    -------
    >>> [p.name for p in GRULayer((None, 5, 3), 4).get_params(regularizable=False)]
    ['b_resetgate', 'b_updategate', 'b_hidden_update', 'hid_init']
    """

    GATES = ("resetgate", "updategate", "hidden_update")

    def __init__(self, incoming, num_units, resetgate=Gate(W_cell=None), updategate=Gate(W_cell=None),
                 hidden_update=Gate(W_cell=None, nonlinearity=nonlinearities.tanh), hid_init=init.Constant(0.0),
                 backwards=False, learn_init=False, gradient_steps=-1, grad_clipping=0, unroll_scan=False,
                 precompute_input=True, mask_input=None, only_return_final=False, **kwargs):
        super().__init__(incoming, num_units, (resetgate, updategate, hidden_update), {"hid_init": hid_init},
                         mask_input=mask_input, backwards=backwards, learn_init=learn_init,
                         gradient_steps=gradient_steps, grad_clipping=grad_clipping, unroll_scan=unroll_scan,
                         precompute_input=precompute_input, only_return_final=only_return_final, **kwargs)
        self._add_initial_state("hid_init", hid_init, (self.num_units,))

    def get_output_for(self, inputs, **kwargs):
        input = self._prepare_input(inputs[0])
        nl = self.gate_nonlinearities

        def step(input_n, hid_prev, W_hid, *args):
            if not self.precompute_input:
                W_in, b = args
                input_n = pt.dot(input_n, W_in) + b
            x_reset, x_update, x_hidden = self._gate_slices(input_n)
            h_reset, h_update, h_hidden = self._gate_slices(pt.dot(hid_prev, W_hid))
            resetgate = nl["resetgate"](_clip(x_reset + h_reset, self.grad_clipping))
            updategate = nl["updategate"](_clip(x_update + h_update, self.grad_clipping))
            hidden_update = nl["hidden_update"](_clip(x_hidden + resetgate * h_hidden, self.grad_clipping))
            return [(1 - updategate) * hid_prev + updategate * hidden_update]

        hid_init = self._initial_state("hid_init", inputs, input.shape[1])
        non_seqs = [self._stacked("W_hid_to_", 1), *self._input_params()]
        [hid_out] = self._loop(step, input, self._mask(inputs, 2), [hid_init], non_seqs)
        return self._finish(hid_out)
