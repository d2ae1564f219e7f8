"""The optional compiled parts: the pickle scanner (frexport/decode/_scan.c), the trace rows' appender
(frexport/model/_rows.c), the passes over a snapshot's entries in runs (frexport/model/_runs.c), the
engine's per-group matching (frexport/analysis/_matching.c) and the stragglers' loops
(frexport/analysis/_straggler.c). Everything else is in pyproject.toml.

`optional=True`: without a C compiler (or Python headers) the build warns and goes on, and frexport
runs on its pure-Python path (frexport.decode.scanned.available() is then False; `frexport --version`
and the log of `analyze` and `serve` say so). _scan_fields.h is generated from frexport/decode/fields.py
(scripts/gen_scan_fields.py); releases build manylinux wheels with scripts/build_wheels.sh.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("frexport.decode._scan", ["frexport/decode/_scan.c"], optional=True,
                             depends=["frexport/decode/_scan_fields.h"],
                             extra_compile_args=["-O2", "-std=c99", "-Wall"]),
                   Extension("frexport.model._rows", ["frexport/model/_rows.c"], optional=True,
                             depends=["frexport/_group_columns.h"],
                             extra_compile_args=["-O2", "-std=c99", "-Wall"]),
                   Extension("frexport.model._runs", ["frexport/model/_runs.c"], optional=True,
                             depends=["frexport/_group_columns.h"],
                             extra_compile_args=["-O2", "-std=c99", "-Wall"]),
                   Extension("frexport.analysis._matching", ["frexport/analysis/_matching.c"], optional=True,
                             depends=["frexport/_group_columns.h"],
                             extra_compile_args=["-O2", "-std=c99", "-Wall"]),
                   Extension("frexport.analysis._straggler", ["frexport/analysis/_straggler.c"], optional=True,
                             depends=["frexport/_group_columns.h"],
                             extra_compile_args=["-O2", "-std=c99", "-Wall"])])
