"""Read-only views of a research repo: status/ideas/show, progress, report, export, doctor, the
W&B mirror and the web dashboard. Nothing here writes the research history."""
