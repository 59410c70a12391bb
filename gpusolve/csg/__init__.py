"""Coalition structure generation by dynamic programming over subsets."""
