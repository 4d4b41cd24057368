"""Environment variables that change what `import dapo_rllib` does."""

#: Set (to anything) in a process that needs no Ray, such as the scoring child: nothing is registered.
NO_REGISTRATION_ENV = "DAPO_RLLIB_NO_REGISTRATION"
