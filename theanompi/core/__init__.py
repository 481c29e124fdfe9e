"""The bottom layer: what every other part of theanompi uses, importing nothing of theanompi's above it.

Errors, rank-prefixed logging, polling without spinning, the safe loader (:mod:`theanompi.core.safe_load`: every file
that could carry code is read through it), atomic writes, device strings, the session options (their
parsers and the one typed table of every rule's options) and the cross-checks between them. Nothing here imports
pytensor, mpi4py, jax, cupy or torch at module level.
"""
