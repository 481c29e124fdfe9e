"""Launch the default session from Python: BSP-avg (local SGD) on two CPU workers.

    python examples/launch_session.py
"""

import sys

from theanompi import BSP

rule = BSP()
rule.init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
          sync_type="avg", avg_freq=4, n_epochs=15, model_options={"batch_size": 32, "hidden": 256})
sys.exit(rule.wait())
