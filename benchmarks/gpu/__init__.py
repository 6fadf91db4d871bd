"""GPU harnesses: the GPU check and the GPU memory calibration (both also run on CPU in reduced form)."""
