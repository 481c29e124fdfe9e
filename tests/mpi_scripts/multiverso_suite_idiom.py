"""Multiverso's own test-suite idiom (unittest, ``mv.init()`` in ``setUpModule``, values in ``floatX``) run with
``theanompi.multiverso``: a 200x200 shared variable grows by two steps of 1..40000 per round on every worker, and
after each round's barrier every worker holds exactly ``round x 2 x workers`` times the step.

From round ~60 on (4 workers) the values pass 2**24, where float32 no longer holds every integer: the suite assumes
Theano's float64 floatX, which ``import theanompi.multiverso`` leaves in place (``import theanompi`` alone would
choose float32). ``python multiverso_suite_idiom.py [ROUNDS]`` (default 100), under ``mpiexec -n 4``.
"""

import sys
import unittest

import numpy as np

import theanompi.multiverso as mv

ROUNDS = int(sys.argv.pop(1)) if len(sys.argv) > 1 else 100


def setUpModule():
    mv.init()


def tearDownModule():
    mv.shutdown()


class SharedVariableRounds(unittest.TestCase):
    def test_floatx_is_pytensors_own_default(self):
        import pytensor

        self.assertEqual(pytensor.config.floatX, "float64")

    def test_every_round_sums_exactly(self):
        import pytensor

        from theanompi.multiverso.theano_ext import sharedvar

        rows, cols = 200, 200
        W = sharedvar.mv_shared(value=np.zeros((rows, cols), dtype=pytensor.config.floatX), name="W", borrow=True)
        step = np.arange(1, rows * cols + 1, dtype=pytensor.config.floatX).reshape(rows, cols)
        add_step = pytensor.function([], updates=[(W, W + step)])
        mv.barrier()
        for i in range(ROUNDS):
            add_step()
            add_step()
            sharedvar.sync_all_mv_shared_vars()
            mv.barrier()
            sharedvar.sync_all_mv_shared_vars()  # the others' adds of this round
            expected = step * (i + 1) * 2 * mv.workers_num()
            self.assertEqual(int(np.count_nonzero(W.get_value() != expected)), 0, f"round {i}")
            mv.barrier()


if __name__ == "__main__":
    unittest.main()
