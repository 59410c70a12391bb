"""The problem model: variables, cost functions, random instances."""
