"""Theano-MPI's Lasagne model zoo at its path: ``theanompi.models.lasagne_model_zoo.<module>``.

* ``vgg16.VGG16``: VGG-16 on Theano-MPI's ImageNet batches
* ``resnet50.ResNet50``: ResNet-50 (bottleneck blocks) on Theano-MPI's ImageNet batches
* ``wgan.WGAN``: Wasserstein GAN, DCGAN networks, on MNIST
* ``lsgan.LSGAN`` (and ``lsgan_cifar10.LSGAN``): least-squares GAN, DCGAN networks, on MNIST (CIFAR-10)

Written here on the model zoo (:mod:`theanompi.models.zoo`), with Theano-MPI's defaults; Theano-MPI's own
Lasagne files run too, after ``theano`` -> ``pytensor`` (``import lasagne`` gives :mod:`theanompi.lasagne`).
"""
