"""A stock RLlib PPO config on CartPole, in the format `rllib train file` reads."""

from ray.rllib.algorithms.ppo import PPOConfig

config = (
    PPOConfig()
    .environment("CartPole-v1")
    .env_runners(num_env_runners=0)
    .training(train_batch_size_per_learner=400, minibatch_size=100, num_epochs=2, lr=3e-4)
)

stop = {"training_iteration": 2}
