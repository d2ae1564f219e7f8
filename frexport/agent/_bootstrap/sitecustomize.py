"""Loaded by Python at start-up when frexport-launch puts this directory on PYTHONPATH.

Enables frexport.agent (it acts only in rank processes, not in launchers or a rank's children),
then runs the sitecustomize this one shadows, if any, so a site's or a distribution's own start-up hook still runs.
"""

import importlib.machinery
import importlib.util
import os
import sys

try:
    import frexport.agent  # noqa: F401 - enables itself when FREXPORT_AGENT_DIR is set
except Exception as exc:  # noqa: BLE001 - never break the interpreter's start-up
    sys.stderr.write(f"frexport.agent: not loaded: {exc}\n")

_here = os.path.dirname(os.path.abspath(__file__))
_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    try:
        _spec.loader.exec_module(_module)
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write(f"frexport: the shadowed sitecustomize failed: {exc}\n")
