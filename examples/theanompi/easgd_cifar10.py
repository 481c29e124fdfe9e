"""Theano-MPI's EASGD example for its CIFAR-10 model, here: a server and two workers on CPU devices.

    MODEL_DATA_DIR=/data/cifar-10-batches-py python examples/theanompi/easgd_cifar10.py

As in Theano-MPI, the first device is the server's; `theanompi.models` exports Cifar10_model.
"""
from theanompi import EASGD

rule = EASGD()

rule.init(devices=['cpu0', 'cpu1', 'cpu2'],  # cpu0: server, cpu1 and cpu2: workers
          modelfile='theanompi.models',
          modelclass='Cifar10_model')
rule.wait()
