"""The launcher process: ``tmlauncher`` (:mod:`~theanompi.launch.cli`), the cfg file (:mod:`~theanompi.launch.cfg`),
the devices of a batch job's allocation or a hostfile (:mod:`~theanompi.launch.allocation`), checking and planning a
session (:mod:`~theanompi.launch.plan`), starting and supervising ``mpiexec`` (:mod:`~theanompi.launch.mpiexec`) or
printing what it would run (:mod:`~theanompi.launch.dry_run`), and the user's handle on a session
(``BSP().init(...)``, ``wait()``: :mod:`~theanompi.launch.handles`).

The top layer. It never imports mpi4py or pytensor (``tests/test_light_imports.py`` checks it): only the ranks need
them. Loading the user's ModelClass to check it before any rank starts is the one place the launcher runs model code.
"""
