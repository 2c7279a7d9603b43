"""Offline drivers of the simulator on files: the workload suite's runs and the PNG report."""
