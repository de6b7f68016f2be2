"""Tuning knobs: the values file a tuned commit carries (knobs.py), the Optuna tuner that writes tuned
commits and rebuilds its studies from the notes (tuner.py), and the rule that splits the trial budget
between new LLM ideas and tuning (split.py). docs/policies.md, "Tuning knobs: the hybrid search"."""
