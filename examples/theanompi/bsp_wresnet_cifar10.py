"""Theano-MPI's BSP example for its Keras Wide ResNet (Keras 3 on the torch backend here), three CPU workers,
parameters averaged (`BSP.sync_type = 'avg'` on the class, as in Theano-MPI).

    MODEL_DATA_DIR=/data/cifar-10-batches-py python examples/theanompi/bsp_wresnet_cifar10.py
"""
from theanompi import BSP

BSP.sync_type = 'avg'

rule = BSP()

rule.init(devices=['cpu0', 'cpu1', 'cpu2'],
          modelfile='theanompi.models.keras_model_zoo.wresnet',
          modelclass='Wide_ResNet')
rule.wait()
