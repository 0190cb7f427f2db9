"""One rank's plan on plain integer lists, no torch.

The rule (what a micro-batch costs, when it fits), the lower bounds, the packings,
Karmarkar-Karp and the partitions, the count search, balancing, equal rows and the planner.
"""
