"""Theano-MPI's Keras model zoo at its path: ``theanompi.models.keras_model_zoo.wresnet.Wide_ResNet``
(Keras 3 on its torch backend, trained through theanompi's PyTorch adapter)."""
