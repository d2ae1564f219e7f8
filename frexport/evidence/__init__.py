"""Evidence collection: the pipeline stage between the live analysis and the bundle writer.

When a pass brings an incident (a new root cause, ranks gone down), this stage collects what the
bundle needs: the ranks' pickles and stacks, asked of the sources through their typed interface
(sources/handlers.py), the report made by the analysis (analysis/report.py) of what was collected,
and where the ranks are now (analysis/whereabouts.py, from stacks read by decode/stacks.py). It
hands the writer (export/evidence.py) a `Bundle` to write; the writer only writes what it is handed.
"""
