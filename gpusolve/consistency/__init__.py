"""Keeping domains consistent with the hard constraints: node and generalised arc consistency, AllDifferent."""
