"""Choosing a strategy and its parameters for a late-data target on a recorded history."""
