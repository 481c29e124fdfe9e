"""``python -m theanompi``: the same as ``tmlauncher`` (:mod:`theanompi.launch.cli`).

Example
-------
>>> from theanompi.launch.cli import build_parser
>>> build_parser().prog
'tmlauncher'
"""

import sys

from theanompi.launch.cli import main

if __name__ == "__main__":
    sys.exit(main())
