"""The primal graph and elimination orderings."""
