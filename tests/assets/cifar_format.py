"""Writing CIFAR-10 python batch files exactly as the official archive holds them (for tests)."""

import io
import pickle
import struct


class Py2Pickler(pickle._Pickler):
    """Writes str and bytes as Python 2 ``str`` (BINSTRING opcodes), as cPickle did for the official files."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, obj):
        raw = obj.encode("latin-1") if isinstance(obj, str) else obj
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(raw)

    dispatch[bytes] = save_py2_str
    dispatch[str] = save_py2_str


def official_bytes(obj) -> bytes:
    """Protocol 2, Python 2 strings, numpy 1.x module names: what ``cifar-10-python.tar.gz`` holds."""
    buf = io.BytesIO()
    Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
