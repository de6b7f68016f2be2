"""The loop and what it drives: plan and judge (pure), dispatch and collect through runners,
recovery, host health, the arrival gate and the watcher."""
