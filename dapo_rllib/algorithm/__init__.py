"""The algorithm side: DAPO's config and training step, its neighbours (the GRPO family), the
connector pieces, the learners, the pure math (`core_algos`), dynamic sampling and validation.

It drives the rollout side (`dapo_rllib.rollout`) and the tasks (`dapo_rllib.tasks`); neither of
those imports anything from here.
"""
