"""theanompi's version, in one place: ``theanompi.__version__``, ``tmlauncher --version`` and setup.py read it.

Example
-------
>>> VERSION.count(".")
2
"""

VERSION = "0.1.0"
