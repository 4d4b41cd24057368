"""Reward functions."""
