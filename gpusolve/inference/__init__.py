"""Elimination and message passing: (mini-)bucket elimination, sum-product tasks, cost shifting."""
