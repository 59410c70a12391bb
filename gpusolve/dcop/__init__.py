"""Distributed constraint optimisation (DCOP): DPOP and ADPOP, every agent's work a Dask task."""
