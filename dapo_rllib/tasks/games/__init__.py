"""Games of two players for self-play (`dapo_rllib.tasks.game_env`): the rules of each, pure Python."""
