"""The one error family of the safe loader: a file refused because reading it could run code.

Every refusal is an :class:`UnsafeFileError`, a :class:`~theanompi.core.errors.ConfigError` (one line
naming the file and what it holds; exit code 2 at launch); nothing from the file has run when it is
raised. Its subclasses say which kind of file refused: :class:`UnsafePickleError` for a pickle,
:class:`UnsafeHickleError` for a hickle/HDF5 file. ``except UnsafeFileError`` catches both.

Example
-------
>>> issubclass(UnsafePickleError, UnsafeFileError), issubclass(UnsafeHickleError, UnsafeFileError)
(True, True)
>>> raise UnsafeHickleError("hickle file 'b.hkl' carries a pickled Python object at node '/data'")
Traceback (most recent call last):
theanompi.core.safe_load.errors.UnsafeHickleError: hickle file 'b.hkl' carries a pickled Python object at node '/data'
"""

from theanompi.core.errors import ConfigError


class UnsafeFileError(ConfigError):
    """A file would need to run code to be read (unpickle a global outside what its reader allows, or content
    that is not plain data); nothing from it was executed."""


class UnsafePickleError(UnsafeFileError):
    """A pickle references a global outside its reader's allow-list, or an object from outside the pickle."""


class UnsafeHickleError(UnsafeFileError):
    """A hickle/HDF5 file carries a pickle that names a global not allowed, a pickled object where only data is
    read, a link out of the file, or is a hickle v3 file (read with ``dill``)."""
