"""DAPO on a two-node Ray cluster (Ray's multi-node test cluster, both nodes on this machine).

The head node offers the custom resource `rollout_node`, the second node `learner_node`; the
config asks for one of each per env runner and per learner, so the vLLM env runner and the
learner actor run on different Ray nodes (different raylets and object stores: the learner's
weight buckets reach the engine through Ray's object transfer between nodes). One step samples
and trains, the engine ends up with the learner's weights, a checkpoint restores into a new
algorithm on the same two nodes, and that algorithm's next step is the uninterrupted run's.
"""

import tempfile

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster
from ray.rllib.algorithms.algorithm import Algorithm

from dapo_rllib.columns import Metrics
from tests.support.runs import CHECKED, tiny_config, unpadded

ROLLOUT, LEARNER = "rollout_node", "learner_node"
OBJECT_STORE_BYTES = 400 * 2**20


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes on this machine, each with one CPU and its own custom resource.

    The session's other tests share one `ray.init` (conftest's `ray_session`); if it is up, it is
    shut down for this module and started again afterwards with conftest's arguments.

    The cluster lives under its own Ray temp directory: Ray's test cluster writes its address where
    `ray.init()` without an address looks for a cluster to join (`<temp dir>/ray_current_cluster`),
    and in the default one (/tmp/ray) every other test process on this machine, `make test`'s second
    worker and the `rllib` commands the tests start, would join this cluster instead of starting its own.
    """
    was_initialized = ray.is_initialized()
    if was_initialized:
        ray.shutdown()
    with (
        pytest.MonkeyPatch.context() as env,
        tempfile.TemporaryDirectory(prefix="ray-", dir="/tmp", ignore_cleanup_errors=True) as temp_dir,
    ):
        env.setenv("RAY_TMPDIR", temp_dir)  # short: Ray's socket paths under it must stay under 108 bytes
        yield from _two_nodes()
    if was_initialized:
        ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)  # as conftest's ray_session


def _two_nodes():
    """The two-node cluster, joined by this process until the module is done."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {ROLLOUT: 1},
            "object_store_memory": OBJECT_STORE_BYTES,
            "include_dashboard": False,
        },
    )
    try:
        cluster.add_node(num_cpus=1, resources={LEARNER: 1}, object_store_memory=OBJECT_STORE_BYTES)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def node_with(resource: str) -> str:
    (node_id,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"]]
    return node_id


def placement(algo) -> dict[str, list[str]]:
    """The Ray node ids the env runner actors and the learner actors run on.

    (Lambdas, not module functions: cloudpickle sends those by reference, and the actors of a
    cluster joined by address cannot import this test module.)"""
    runners = algo.env_runner_group.foreach_env_runner(
        lambda _: ray.get_runtime_context().get_node_id(), local_env_runner=False
    )
    learners = algo.learner_group._get_results(
        algo.learner_group.foreach_learner(lambda _: ray.get_runtime_context().get_node_id())
    )
    return {"env_runners": runners, "learners": learners}


def learner_weights(algo):
    """The (remote) learner's parameters under Hugging Face names."""
    state = algo.learner_group.get_state(components="learner/rl_module")["learner"]["rl_module"]["default_policy"]
    return {k.removeprefix("model."): np.asarray(v) for k, v in state.items()}


def engine_weights(algo):
    (engine,) = algo.env_runner_group.foreach_env_runner(
        lambda runner: runner.engine_parameters(CHECKED), local_env_runner=False
    )
    return engine


@pytest.fixture(scope="module")
def run(cluster, tiny_model_path, tmp_path_factory):
    """Step 1, checkpoint, step 2 (uninterrupted); then a new algorithm restored from the
    checkpoint and its step 2."""
    tensorboard_dir = tmp_path_factory.mktemp("multi_node_tb")
    config = (
        tiny_config(tiny_model_path)
        .env_runners(num_env_runners=1, num_cpus_per_env_runner=1, custom_resources_per_env_runner={ROLLOUT: 1})
        .learners(num_learners=1, num_cpus_per_learner=1, custom_resources_per_learner={LEARNER: 1})
        .reporting(tensorboard_dir=str(tensorboard_dir))
    )
    checkpoint = tmp_path_factory.mktemp("multi_node") / "ckpt"
    algo = config.build_algo()
    try:
        out = dict(
            nodes={
                ROLLOUT: node_with(ROLLOUT),
                LEARNER: node_with(LEARNER),
                "driver": ray.get_runtime_context().get_node_id(),
            }
        )
        out["placement"] = placement(algo)
        out["initial"] = learner_weights(algo)
        out["initial_engine"] = engine_weights(algo)
        out["first"] = algo.train()
        out["after_first"] = learner_weights(algo)
        out["engine_after_first"] = engine_weights(algo)
        algo.save_to_path(str(checkpoint))
        out["continued"] = algo.train()
        out["continued_weights"] = learner_weights(algo)
    finally:
        algo.stop()
    out["tensorboard_files"] = sorted(p.name for p in tensorboard_dir.rglob("events.out.tfevents.*"))
    # The old actors are gone, so their custom resources are free for the restored ones.
    restored = Algorithm.from_checkpoint(str(checkpoint))
    try:
        out["restored_placement"] = placement(restored)
        out["restored_iteration"] = restored.iteration
        out["restored_weights"] = learner_weights(restored)
        out["restored_engine"] = engine_weights(restored)
        out["resumed"] = restored.train()
        out["resumed_weights"] = learner_weights(restored)
    finally:
        restored.stop()
    return out


def test_env_runner_and_learner_run_on_different_nodes(run):
    nodes = run["nodes"]
    assert nodes[ROLLOUT] != nodes[LEARNER]
    assert nodes["driver"] == nodes[ROLLOUT]  # the driver joined the cluster at its head node
    for where in (run["placement"], run["restored_placement"]):
        assert where == {"env_runners": [nodes[ROLLOUT]], "learners": [nodes[LEARNER]]}


def test_one_step_samples_and_trains_across_nodes(run):
    first = run["first"]
    rollout = first[Metrics.ROLLOUT]
    assert rollout["groups_kept"] == 8
    assert rollout[Metrics.GENERATED_TOKENS] > 0
    learner = first["learners"]["default_policy"]
    assert learner["num_module_steps_trained"] == 32  # 8 groups of 4, all on the one learner
    for key in (Metrics.POLICY_LOSS, Metrics.ENTROPY, Metrics.GRAD_NORM):
        assert np.isfinite(learner[key]), key
    assert learner[Metrics.GRAD_NORM] > 0
    moved = max(np.abs(run["after_first"][k] - v).max() for k, v in run["initial"].items())
    assert moved > 1e-4
    assert run["tensorboard_files"], "the driver wrote no TensorBoard event file"


def test_engine_on_the_rollout_node_holds_the_learner_weights(run):
    for name in CHECKED:
        learner = run["after_first"][name]
        np.testing.assert_allclose(
            unpadded(run["engine_after_first"][name], learner), learner, rtol=0, atol=1e-6, err_msg=name
        )
    embed = "model.embed_tokens.weight"
    assert not np.array_equal(run["engine_after_first"][embed], run["initial_engine"][embed])


def test_restored_algorithm_holds_the_saved_weights_on_both_nodes(run):
    assert run["restored_iteration"] == 1
    for name, value in run["after_first"].items():
        np.testing.assert_array_equal(run["restored_weights"][name], value, err_msg=name)
    for name in CHECKED:
        learner = run["after_first"][name]
        np.testing.assert_allclose(
            unpadded(run["restored_engine"][name], learner), learner, rtol=0, atol=1e-6, err_msg=name
        )


def test_restored_step_is_the_uninterrupted_step(run):
    resumed, continued = run["resumed"], run["continued"]
    assert resumed["training_iteration"] == continued["training_iteration"] == 2
    # Same prompts, same completions: data position and sampling seeds came back.
    for key in ("acc_mean", "reward_mean", "response_length_mean", "groups_generated", "groups_kept"):
        assert resumed[Metrics.ROLLOUT][key] == continued[Metrics.ROLLOUT][key], key
    rl, cl = resumed["learners"]["default_policy"], continued["learners"]["default_policy"]
    assert rl["default_optimizer_learning_rate"] == cl["default_optimizer_learning_rate"]
    for key in (Metrics.POLICY_LOSS, Metrics.ENTROPY, Metrics.GRAD_NORM, Metrics.MEAN_TOKEN_PROB):
        assert rl[key] == pytest.approx(cl[key], rel=1e-5, abs=1e-7), key
    # Optimizer state and LR schedule came back too: the weights after step 2 agree.
    for name, value in run["continued_weights"].items():
        np.testing.assert_allclose(run["resumed_weights"][name], value, rtol=1e-5, atol=1e-7, err_msg=name)
