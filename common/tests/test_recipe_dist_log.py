import io
import json

import pytest
from zoo.dist import first_slurm_host, get_dist_env, is_primary
from zoo.errors import UserError
from zoo.log import MetricsLogger
from zoo.recipe import compile_mode, flag, load_recipe, parse_overrides


@pytest.fixture
def recipes(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "epochs: 90\noptimizer:\n  name: sgd\n  lr: 0.256\n  momentum: 0.875\n"
    )
    (tmp_path / "short.yaml").write_text("base: base.yaml\nepochs: 5\noptimizer:\n  lr: 0.1\n")
    return tmp_path


def test_recipe_base_and_overrides(recipes):
    recipe = load_recipe(recipes / "short.yaml", parse_overrides(["optimizer.momentum=0.9", "epochs=7"]))
    assert recipe == {"epochs": 7, "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9}}
    assert load_recipe(recipes / "base.yaml")["optimizer"]["lr"] == 0.256


def test_recipe_unknown_key_and_missing_file(recipes):
    with pytest.raises(UserError, match="unknown recipe key 'optimizer.lrr'.*lr, momentum, name"):
        load_recipe(recipes / "short.yaml", {"optimizer.lrr": 1})
    with pytest.raises(UserError, match="recipe not found"):
        load_recipe(recipes / "nope.yaml")
    with pytest.raises(UserError, match="not key=value"):
        parse_overrides(["epochs"])


def test_dist_torchrun():
    env = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}
    env |= {"MASTER_ADDR": "n1", "MASTER_PORT": "1234", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    d = get_dist_env(env)
    assert (d.rank, d.local_rank, d.world_size, d.local_world_size) == (5, 1, 8, 4)
    assert (d.master_addr, d.master_port, d.launcher) == ("n1", 1234, "torchrun")
    assert not is_primary(env)


def test_dist_slurm():
    env = {
        "SLURM_PROCID": "6",
        "SLURM_LOCALID": "2",
        "SLURM_NTASKS": "10",
        "SLURM_NODEID": "1",
        "SLURM_TASKS_PER_NODE": "4(x2),2",
        "SLURM_JOB_NODELIST": "gpu[007-009,12],cpu1",
    }
    d = get_dist_env(env)
    assert (d.rank, d.local_rank, d.world_size, d.local_world_size) == (6, 2, 10, 4)
    assert (d.master_addr, d.master_port, d.launcher) == ("gpu007", 29500, "slurm")
    assert get_dist_env(env | {"SLURM_NODEID": "2"}).local_world_size == 2
    assert first_slurm_host("node5") == "node5"


def test_dist_mpi_and_single():
    ompi = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    ompi |= {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "h0"}
    d = get_dist_env(ompi)
    assert (d.rank, d.local_rank, d.world_size, d.local_world_size, d.master_addr) == (3, 1, 4, 2, "h0")
    assert d.launcher == "mpi"
    pmi = get_dist_env({"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"})
    assert (pmi.rank, pmi.world_size, pmi.launcher) == (0, 2, "mpi")
    single = get_dist_env({})
    assert (single.rank, single.world_size, single.launcher) == (0, 1, "single") and is_primary({})


def test_log_json_lines_and_console(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    stream = io.StringIO()
    with MetricsLogger(str(path), total_steps=4, desc="epoch 1", stream=stream) as log:
        for step in range(1, 5):
            log.progress(step, items=32, metrics={"loss": 2.0 / step})
        log.log(4, {"loss": 0.5, "top1": 12.5}, phase="eval")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 1
    metrics = records[0]
    assert metrics["step"] == 4 and metrics["phase"] == "eval"
    assert metrics["metrics"] == {"loss": 0.5, "top1": 12.5} and metrics["units"] == {"loss": "", "top1": "%"}

    out = stream.getvalue()
    assert "[eval] step 4  loss 0.5  top1 12.5%" in out
    assert "epoch 1  [####################] 4/4" in out and "items/s" in out and "ETA 0:00:00" in out
    assert ":::MLLOG" not in out


def test_log_refuses_phases_and_names_off_the_vocabulary(tmp_path):
    with MetricsLogger(str(tmp_path / "m.jsonl"), stream=io.StringIO()) as log:
        with pytest.raises(ValueError, match="phase 'val' is not one of train, eval"):
            log.log(1, {"top1": 1.0}, phase="val")
        with pytest.raises(ValueError, match="'images_per_s' is not in zoo.metrics.VOCABULARY"):
            log.log(1, {"images_per_s": 1.0})
        with pytest.raises(ValueError, match="is in '%'.* not 'fraction'"):
            log.log(1, {"top1": 0.5}, units={"top1": "fraction"}, phase="eval")
        log.log(2, {"throughput": 3.0, "loss_box": 0.1}, units={"throughput": "img/s"})
    record = json.loads((tmp_path / "m.jsonl").read_text())
    assert record["units"] == {"throughput": "img/s", "loss_box": ""}


def test_log_disabled_is_a_no_op(tmp_path):
    stream = io.StringIO()
    with MetricsLogger(str(tmp_path / "m.jsonl"), enabled=False, stream=stream) as log:
        log.log(1, {"loss": 1.0})
        log.progress(1, 8)
    assert stream.getvalue() == "" and not (tmp_path / "m.jsonl").exists()


def test_recipe_keys_are_checked_against_the_schema(recipes, tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "mine.yaml").write_text("base: ../short.yaml\nepoch: 3\noptimizer:\n  lr: 0.2\n")
    with pytest.raises(UserError, match=r"unknown recipe key 'epoch' .*did you mean 'epochs'"):
        load_recipe(user / "mine.yaml", known_keys_from=recipes / "base.yaml")
    (user / "mine.yaml").write_text("base: ../short.yaml\noptimizer:\n  lr_per_265: 3\n")
    with pytest.raises(UserError, match=r"'optimizer.lr_per_265'"):
        load_recipe(user / "mine.yaml", known_keys_from=[recipes / "base.yaml"])
    (user / "mine.yaml").write_text("base: ../short.yaml\nepochs: 3\n")
    assert load_recipe(user / "mine.yaml", known_keys_from=recipes / "base.yaml")["epochs"] == 3
    with pytest.raises(UserError, match="did you mean 'epochs'"):
        load_recipe(recipes / "short.yaml", {"epoch": 1})
    with pytest.raises(ValueError, match="not the folder"):
        load_recipe(user / "mine.yaml", known_keys_from=recipes)


def test_a_recipe_saved_beside_the_shipped_ones_does_not_vouch_for_its_own_keys(recipes):
    # Saved in the model's configs/ folder, deriving from a shipped recipe or standing alone, and with a
    # second file deriving from it: the misspelt key is unknown every time.
    (recipes / "mine.yaml").write_text("base: short.yaml\noptimizer:\n  lr_per_265: 3\n")
    (recipes / "alone.yaml").write_text("epochs: 2\noptimizer:\n  name: sgd\n  lr_per_265: 3\n")
    (recipes / "derived.yaml").write_text("base: mine.yaml\nepochs: 4\n")
    for name in ("mine.yaml", "alone.yaml", "derived.yaml"):
        with pytest.raises(UserError, match=rf"unknown recipe key 'optimizer.lr_per_265' in .*{name}"):
            load_recipe(recipes / name, known_keys_from=recipes / "base.yaml")
    assert load_recipe(recipes / "short.yaml", known_keys_from=recipes / "base.yaml")["epochs"] == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("epochs: five\n", "epochs must be a positive integer"),
        ("optimizer:\n  lr: fast\n", r"optimizer.lr must be a number, not 'fast' \(.*mine.yaml\)"),
        ("optimizer:\n  momentum: true\n", "optimizer.momentum must be a number, not True"),
        ("optimizer: sgd\n", r"optimizer is a section \(set its keys\), not 'sgd'"),
        ("optimizer:\n  name:\n    kind: sgd\n", "unknown recipe key 'optimizer.name.kind'"),
    ],
)
def test_recipe_values_are_checked_against_the_schema_types(recipes, text, message):
    (recipes / "mine.yaml").write_text("base: short.yaml\n" + text)
    with pytest.raises(UserError, match=message):
        load_recipe(recipes / "mine.yaml", known_keys_from=recipes / "base.yaml")
    (recipes / "mine.yaml").write_text("base: short.yaml\noptimizer:\n  lr: 2\n  name: lars\n")
    assert load_recipe(recipes / "mine.yaml", known_keys_from=recipes / "base.yaml")["optimizer"]["lr"] == 2


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "true", "abc"])
def test_counts_must_be_positive_integers(recipes, value):
    with pytest.raises(UserError, match=r"epochs must be a positive integer"):
        load_recipe(recipes / "short.yaml", {"epochs": value})


def test_count_lists_and_non_negative_values(tmp_path):
    (tmp_path / "r.yaml").write_text("eval:\n  epochs: [1, 5]\nworkers: 0\nwarmup_epochs: 0.5\n")
    assert load_recipe(tmp_path / "r.yaml")["eval"]["epochs"] == [1, 5]
    with pytest.raises(UserError, match="eval.epochs must be a positive integer"):
        load_recipe(tmp_path / "r.yaml", {"eval.epochs": "[1, 0]"})
    with pytest.raises(UserError, match="workers must be a number >= 0"):
        load_recipe(tmp_path / "r.yaml", {"workers": "-1"})


@pytest.mark.parametrize(
    "value, expected",
    [(True, True), ("true", True), ("1", True), ("yes", True), (False, False), ("0", False)],
)
def test_flag_reads_yaml_and_override_booleans(value, expected):
    assert flag(value, "train.channels_last") is expected


def test_flag_and_compile_mode_name_the_key_of_a_bad_value():
    with pytest.raises(UserError, match="optimizer.fused must be true or false, not 'maybe'"):
        flag("maybe", "optimizer.fused")
    with pytest.raises(
        UserError, match="compile must be false or one of default, max-autotune-no-cudagraphs, "
    ):
        compile_mode("fast", key="compile", modes=("default", "max-autotune-no-cudagraphs"))


@pytest.mark.parametrize(
    "value, mode",
    [(False, None), ("none", None), ("eager", None), (None, None), (True, "default"), ("true", "default")]
    + [("reduce-overhead", "reduce-overhead"), ("max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs")],
)
def test_compile_mode_reads_the_recipe_value(value, mode):
    assert compile_mode(value) == mode
