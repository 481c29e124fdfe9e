"""The bottom layer: what every other part of theanompi uses, importing nothing of theanompi's above it.

Errors, rank-prefixed logging, polling without spinning, safe file I/O, device strings, the session options (their
parsers and the one typed table of every rule's options) and the cross-checks between them. Nothing here imports
pytensor, mpi4py, jax, cupy or torch at module level.
"""
