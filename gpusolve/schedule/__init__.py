"""Solving one problem: the anytime schedule of bounding, elimination and search phases."""
