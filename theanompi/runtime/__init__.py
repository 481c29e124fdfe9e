"""What every rank runs whatever its rule: the rank's context, building the model, the workers' epoch loop, and the
records a session leaves (epoch metrics, progress lines, the final model, ``summary.json``).

Imports the layers below it (core, backend, session, comm, models); the rules build on it.
"""
