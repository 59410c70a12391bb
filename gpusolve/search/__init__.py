"""Search for upper bounds and proofs: AND/OR branch and bound, the compiled core, local search, MAC."""
