"""Judging watermarks on a stream: the replay, the fixed-delay baseline and the comparison of strategies."""
