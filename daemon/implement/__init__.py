"""Turning an idea into a commit: implementers (LLM edit, coding agent), diff parsing and repair,
fuzzy hunk location, the safety gates, and the prompts they render."""
