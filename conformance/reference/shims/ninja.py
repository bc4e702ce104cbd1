"""Stand-in for the PyPI `ninja` module, which Debian does not package.

DeepSpeed's op builder does `import ninja` only to check that ninja is available
before a JIT build; the build itself runs the `ninja` binary of Debian's
ninja-build package through torch.utils.cpp_extension.
"""
import os as _os
import shutil as _shutil

_bin = _shutil.which("ninja")
BIN_DIR = _os.path.dirname(_bin) if _bin else "/usr/bin"


def _program(name, args):
    import subprocess
    return subprocess.call([_os.path.join(BIN_DIR, name)] + list(args))
