"""Where Flight Recorder data comes from: dump directories and PyTorch worker servers."""
