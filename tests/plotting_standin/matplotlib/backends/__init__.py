"""Stand-in matplotlib.backends."""
