"""One scratch folder per seqbench process for the caches its libraries write (matplotlib's
config and font cache, torch inductor's cache), removed when the process ends: a command
leaves nothing in $HOME or $TMPDIR it was not asked to write. A cache the user points
elsewhere ($MPLCONFIGDIR, $TORCHINDUCTOR_CACHE_DIR) is left as set."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

#: the library caches redirected, by environment variable → sub-folder of the scratch folder
CACHES = {"MPLCONFIGDIR": "matplotlib", "TORCHINDUCTOR_CACHE_DIR": "torchinductor"}
_SCRATCH: list[Path] = []


def use_scratch() -> Path | None:
    """Point each unset cache variable into this process's scratch folder (made once, removed
    at exit); None when every cache is already set elsewhere."""
    unset = [k for k in CACHES if not os.environ.get(k)]
    if not unset:
        return _SCRATCH[0] if _SCRATCH else None
    if not _SCRATCH:
        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="seqbench-")))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    for key in unset:
        os.environ[key] = str(_SCRATCH[0] / CACHES[key])
    return _SCRATCH[0]
