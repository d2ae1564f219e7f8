"""train.py on a torch whose Flight Recorder dump API the agent does not know: `_dump_fr_trace` is
replaced, before the agent looks, by one that refuses its arguments (as a renamed parameter or a
moved function would). A real torch cannot be made to have another API: this is the one fake."""

import os
import runpy

import torch


def _moved(*args, **kwargs):
    raise TypeError("_dump_fr_trace(): incompatible function arguments")


torch._C._distributed_c10d._dump_fr_trace = _moved
runpy.run_path(os.path.join(os.path.dirname(__file__), "train.py"), run_name="__main__")
