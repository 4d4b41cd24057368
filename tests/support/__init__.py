"""Helpers the test files share; a test file imports helpers from here, never from another test file.

The test files are laid out as the package: the tests of `dapo_rllib/<subpackage>/` are in
`tests/<subpackage>/`, those of `envs/` in `tests/envs/`, those of the package as a whole and its top-level
modules in `tests/` (tests/test_architecture.py checks both rules).
"""
