"""Self-play: the pieces of training a policy against itself and a league of its past selves."""
