"""One shape inside every model (docs/ARCHITECTURE.md, "One shape inside every model"), checked for every
model in the tree: the run: section of every recipe, the loop in engine.py, one training-checkpoint and
resumed-log naming from zoo, the metrics vocabulary, and no SystemExit below a script's main."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from zoo_tree import ROOT, model_dirs, model_id

MODELS = model_dirs()
# The longest a loop function of engine.py may be: about a screen.
SCREEN_LINES = 80
# zoo's training-checkpoint writer of each framework: a model saves its training state through it.
CHECKPOINT_WRITERS = {
    "PyTorch": "save_training_checkpoint",
    "TensorFlow": "save_training_checkpoint",
    "MXNet": "save_training_checkpoint",
}
# Resumed-run MLPerf log names the models used before zoo.mlperf.log_path.
OLD_LOG_NAMES = re.compile(r"mlperf_resume\{|mlperf_from_epoch|resumed_after_epoch|mlperf-resumed|mlperf\.\{")


CASES = [pytest.param(model_dir, id=model_id(model_dir)) for model_dir in MODELS]


def package_of(model_dir: Path) -> Path:
    packages = [p.parent for p in model_dir.glob("*/__init__.py") if p.parent.name != "tests"]
    assert len(packages) == 1, f"{model_id(model_dir)}: one package expected, found {packages}"
    return packages[0]


def product_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in package_of(model_dir).rglob("*.py"))


@pytest.mark.parametrize("model_dir", CASES)
def test_every_recipe_has_the_run_section(model_dir):
    from zoo.recipe import load_recipe, run_config

    recipes = sorted((model_dir / "configs").glob("*.yaml"))
    for recipe in recipes:
        run_config(load_recipe(recipe), recipe)  # raises UserError naming the key and the file


@pytest.mark.parametrize("model_dir", CASES)
def test_every_recipe_fits_a_default_recipe(model_dir):
    """Entry points check a recipe against their default recipe (zoo.cli.add_run_args): every shipped
    recipe must pass one of the defaults its package names, or users could not train with it."""
    from zoo.errors import UserError
    from zoo.recipe import load_recipe

    source = "\n".join(path.read_text() for path in product_files(model_dir))
    recipes = sorted((model_dir / "configs").glob("*.yaml"))
    defaults = [recipe for recipe in recipes if f'"{recipe.name}"' in source]
    assert defaults, f"{model_id(model_dir)}: the package names no recipe of configs/ as its default"
    for recipe in recipes:
        errors = []
        for default in defaults:
            try:
                load_recipe(recipe, known_keys_from=default)
                break
            except UserError as e:
                errors.append(str(e))
        else:
            raise AssertionError(f"{recipe.relative_to(ROOT)} fits no default recipe: {errors}")


def loop_function(engine: Path, name: str) -> tuple[Path, ast.FunctionDef]:
    """(file, definition) of ``name`` in a model's engine.py: defined there, or imported there from a zoo
    module that a family of models shares (the image classifiers' zoo.classification.engine)."""
    tree = ast.parse(engine.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return engine, node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("zoo."):
            if name in {alias.name for alias in node.names}:
                shared = ROOT / "common" / Path(*node.module.split(".")).with_suffix(".py")
                return loop_function(shared, name)
    raise AssertionError(f"{engine.relative_to(ROOT)} defines no {name}() and imports none from zoo")


@pytest.mark.parametrize("model_dir", CASES)
def test_the_loop_lives_in_engine_py(model_dir):
    package = package_of(model_dir)
    engine = package / "engine.py"
    assert engine.is_file(), f"{model_id(model_dir)}: no {package.name}/engine.py"
    for name in ("train_one_epoch", "evaluate"):
        where, node = loop_function(engine, name)
        length = node.end_lineno - node.lineno + 1
        assert length <= SCREEN_LINES, (
            f"{where.relative_to(ROOT)}: {name}() is {length} lines (a screen: {SCREEN_LINES})"
        )
    for path in product_files(model_dir):
        text = path.read_text()
        if path.stem == "benchmark":
            assert not re.search(rf"\b{package.name}\.train\b|from \. import train\b", text), (
                f"{path.relative_to(ROOT)} imports train.py: a benchmark imports the step / engine"
            )
        if path.stem == "train":
            assert ".backward(" not in text and "GradientTape" not in text, (
                f"{path.relative_to(ROOT)} runs a training step itself: train.py only wires (engine.py, the step)"
            )


@pytest.mark.parametrize("model_dir", CASES)
def test_one_checkpoint_writer_and_one_resumed_log_name(model_dir):
    writer = CHECKPOINT_WRITERS[model_id(model_dir).split("/")[0]]
    texts = {path: path.read_text() for path in product_files(model_dir)}
    assert any(writer in text for text in texts.values()), (
        f"{model_id(model_dir)} does not save its training state through zoo's {writer}"
    )
    for path, text in texts.items():
        assert not OLD_LOG_NAMES.search(text), f"{path.relative_to(ROOT)} names a resumed MLPerf log itself"
    if any("MLPerfLogger(" in text for text in texts.values()):
        assert any("log_path(" in text for text in texts.values()), (
            f"{model_id(model_dir)} writes an MLPerf log without zoo.mlperf.log_path"
        )


def exits_below_main(path: Path) -> list[str]:
    """``raise SystemExit`` / ``sys.exit()`` / ``exit()`` outside a function named main."""
    tree = ast.parse(path.read_text())
    found = []

    def visit(node, inside_main: bool):
        for child in ast.iter_child_nodes(node):
            in_main = inside_main or (isinstance(child, ast.FunctionDef) and child.name == "main")
            if isinstance(child, ast.Raise) and child.exc is not None:
                target = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(target, ast.Name) and target.id == "SystemExit" and not in_main:
                    found.append(f"{path.relative_to(ROOT)}:{child.lineno}")
            if isinstance(child, ast.Call) and not in_main:
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                owner = getattr(func.value, "id", "") if isinstance(func, ast.Attribute) else ""
                if (owner, name) in (("sys", "exit"), ("", "exit")) or (owner == "os" and name == "_exit"):
                    found.append(f"{path.relative_to(ROOT)}:{child.lineno}")
            visit(child, in_main)

    visit(tree, False)
    return found


# Exits below main that are not a user error: the process must end at once (a crash test's abrupt end,
# a signal handler unwinding to run clean-up). Each entry says where and why.
ALLOWED_EXITS = {
    "common/zoo/cli.py": "entry_point: the one place a UserError becomes an exit",
    "common/zoo/triton/server.py": "a termination signal's handler unwinds the stack so the server stops",
    "PyTorch/Classification/ResNet50/resnet50/train.py": "--exit-after-steps: the crash test's os._exit(137)",
    "PyTorch/Classification/EfficientNet/efficientnet/train.py": "--exit-after-steps: the crash test's os._exit(137)",
    "PyTorch/Segmentation/UNet3D/unet3d/train.py": "--exit-after-steps: the crash test's os._exit(137)",
}


@pytest.mark.parametrize("model_dir", CASES)
def test_no_system_exit_below_main(model_dir):
    found = [
        hit
        for path in product_files(model_dir)
        if str(path.relative_to(ROOT)) not in ALLOWED_EXITS
        for hit in exits_below_main(path)
    ]
    assert not found, f"SystemExit below main (raise zoo.errors.UserError instead): {found}"


def test_no_system_exit_below_main_in_zoo():
    found = [
        hit
        for path in sorted((ROOT / "common" / "zoo").rglob("*.py"))
        if str(path.relative_to(ROOT)) not in ALLOWED_EXITS
        for hit in exits_below_main(path)
    ]
    assert not found, f"SystemExit below main in zoo (raise zoo.errors.UserError instead): {found}"


# The common layer stays a set of small modules, each about one concern (docs/ARCHITECTURE.md).
ZOO_MODULE_LINES = 450


def test_no_zoo_module_over_a_few_hundred_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "common" / "zoo").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > ZOO_MODULE_LINES
    }
    assert not long, f"zoo modules over {ZOO_MODULE_LINES} lines (split them by concern): {long}"


def test_every_zoo_module_is_in_the_architecture_page():
    """docs/ARCHITECTURE.md's tables name every module and package of the common layer."""
    doc = (ROOT / "docs/ARCHITECTURE.md").read_text()
    zoo = ROOT / "common" / "zoo"
    names = {p.stem for p in zoo.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in zoo.iterdir() if (p / "__init__.py").is_file()}
    missing = sorted(name for name in names if f"`zoo.{name}" not in doc)
    assert not missing, f"zoo modules docs/ARCHITECTURE.md does not name: {missing}"
