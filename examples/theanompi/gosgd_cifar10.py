"""Theano-MPI's Gossip SGD example for its CIFAR-10 model, here: three gossiping CPU workers.

    MODEL_DATA_DIR=/data/cifar-10-batches-py python examples/theanompi/gosgd_cifar10.py
"""
from theanompi import GOSGD

rule = GOSGD()

rule.init(devices=['cpu0', 'cpu1', 'cpu2'],
          modelfile='theanompi.models',
          modelclass='Cifar10_model')
rule.wait()
