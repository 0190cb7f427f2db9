"""The whole step across DP ranks.

The lock-step model, the global planner
(:func:`~seqlen_balancing.global_batch.step.plan_global_batch`) and the balanced sampler.
"""
