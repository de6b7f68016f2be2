"""autoresearchd: a git-native daemon for execution-grounded automated AI research."""

__version__ = "0.1.0"
