"""Fireworks: the billing sweep behind `make fw-check` (inference goes through the learner's library)."""
