"""A Keras 3 model trained with theanompi.multiverso's MVCallback (Keras on its torch backend).

    KERAS_BACKEND=torch mpiexec -n 2 python examples/multiverso/keras_model.py
"""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np

import theanompi.multiverso as mv
from theanompi.models.data.digits import load_digits_split
from theanompi.multiverso.theano_ext.keras_ext.callbacks import MVCallback

mv.init()
keras.utils.set_random_seed(mv.worker_id())  # different initial weights: the callback starts all from the master's
(x_train, y_train), (x_val, y_val) = load_digits_split()
x, y = x_train[mv.worker_id()::mv.workers_num()], y_train[mv.worker_id()::mv.workers_num()]
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.SGD(0.1),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
callback = MVCallback(model, freq=1)  # collective: syncs weights every batch
model.fit(x, y, batch_size=32, epochs=10, verbose=0, shuffle=False, callbacks=[callback])
mv.barrier()
if mv.is_master_worker():
    accuracy = float(np.mean(np.argmax(model.predict(x_val, verbose=0), axis=1) == y_val))
    print(f"final validation accuracy {100 * accuracy:.2f}%")
mv.shutdown()
