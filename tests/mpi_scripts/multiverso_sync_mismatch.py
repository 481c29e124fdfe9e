"""Sync mode: worker 0 asks for one get more than the others -> an error message, not a hang."""

import _abort_on_error  # noqa: F401
import numpy as np

import theanompi.multiverso as mv
from theanompi.comm.ps.client import ServerError

mv.init(sync=True)
t = mv.ArrayTableHandler(3, init_value=np.zeros(3))
mv.barrier()
t.get()
if mv.worker_id() == 0:
    try:
        t.get()
    except ServerError as err:
        print("detected:", err)
mv.shutdown()
