"""The optional compiled scanner (frexport/decode/_scan.c). Everything else is in pyproject.toml.

`optional=True`: without a C compiler (or Python headers) the build warns and goes on, and frexport
runs on its pure-Python path (frexport.decode.scanned.available() is then False).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("frexport.decode._scan", ["frexport/decode/_scan.c"], optional=True,
                             extra_compile_args=["-O2", "-std=c99", "-Wall"])])
