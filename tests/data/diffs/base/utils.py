"""Small helpers shared by the scripts."""

import os


def env_int(name, default):
    value = os.environ.get(name)
    return int(value) if value else default


def seed_from_env():
    return env_int("AUTORESEARCH_SEED", 1337)