"""The exchange layer: how parameters and updates travel between ranks.

* :mod:`~theanompi.comm.exchange` -- exchangers: collectives on one flat buffer (host MPI, fp16 on the wire, NCCL,
  CUDA-aware MPI) and point-to-point transports;
* :mod:`~theanompi.comm.ps` -- the parameter server (tables sharded over server ranks, updaters, sync/async);
* :mod:`~theanompi.comm.param_access` -- reading and writing a model's parameters, whatever holds them;
* :mod:`~theanompi.comm.fused_params` -- a model's parameters as one contiguous buffer (tensor fusion);
* :mod:`~theanompi.comm.fault_tolerance` -- carrying on without a lost worker (Open MPI's ULFM).
* :mod:`~theanompi.comm.mpi_settings` -- Open MPI settings every rank makes before MPI starts.

Imports :mod:`theanompi.core` and :mod:`theanompi.backend`.
"""
