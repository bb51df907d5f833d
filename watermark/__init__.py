"""Adaptive event-time watermarks: generators, partition combination, replay evaluation."""
