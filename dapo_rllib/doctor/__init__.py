"""`rllib doctor MODEL`: a pre-flight check that the learner and the vLLM engine agree on a model.

template_checks   the tokenizer and the chat template: turns, tools, end of turn, round trip, context
engine_checks     the learner's and vLLM's log-probs, before and after one weight sync
data_checks       a run's data sampled and scored (--data): answers parsed, reward mean, groups with variation
report            the checks' results, the table and the run of them all (`run_doctor`)
"""
