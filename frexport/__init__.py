"""frexport: turn PyTorch Flight Recorder data into diagnoses, metrics and traces."""

__version__ = "0.1.0"
