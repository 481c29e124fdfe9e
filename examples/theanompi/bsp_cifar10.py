"""Theano-MPI's BSP example for its CIFAR-10 model, as a Theano-MPI user runs it here: three CPU workers.

    MODEL_DATA_DIR=/data/cifar-10-batches-py python examples/theanompi/bsp_cifar10.py

The only changes to Theano-MPI's script: `cudaN` devices became `cpuN`, and the data directory comes from the
environment (MODEL_DATA_DIR).
"""
from theanompi import BSP

rule = BSP()

rule.init(devices=['cpu0', 'cpu1', 'cpu2'],
          modelfile='theanompi.models.cifar10',
          modelclass='Cifar10_model')
rule.wait()
