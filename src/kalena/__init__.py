"""Kalena: harvest reserved-but-idle cluster capacity without endangering production."""

__version__ = "0.1.0"
