"""A recipe's run, stage by stage: check, build, train, commit, score, card, push.

The training stages are [`csekit.trainers.runner`][csekit.trainers.runner]'s (they import no publishing code);
scoring is [`csekit.evaluation.run_scores`][csekit.evaluation.run_scores]'s; this module adds the card and the Hub push
and runs them in order ([`run_recipe`][csekit.recipe_run.run_recipe]). Each stage is a function a Python caller can
run alone, in the same order. ``recipes/simcse.py`` is the smallest recipe.
"""

import contextlib
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from huggingface_hub import HfApi

from .atomic import write_json
from .errors import report_errors
from .evaluation.run_scores import score_run
from .loading import LOCAL_PATHS, RESULTS_FILE, local_paths
from .preflight import TRAIN_DATA
from .publishing.hub import push_to_hub
from .publishing.model_card import write_model_card
from .trainers.arguments import group_values
from .trainers.output_dir import RunFolder
from .trainers.runner import (
    TrainingRecipe,
    batch_record,
    build_trainer,
    check_run,
    commit_model,
    describe_batch,
    remove_checkpoints,
    train_run,
)

logger = logging.getLogger(__name__)


@dataclass
class ContrastiveRecipe(TrainingRecipe):
    """A Trainer-based recipe: what it trains ([`TrainingRecipe`][csekit.trainers.runner.TrainingRecipe]) and its
    whole run, ``main``."""

    def main(self, argv: Optional[list] = None, prog: Optional[str] = None) -> dict:
        """Parse ``argv`` and run the recipe ([`run_recipe`][csekit.recipe_run.run_recipe]); returns the test
        scores."""
        model_args, data_args, training_args, extra_args = self.parse(argv, prog)
        return run_recipe(self, model_args, data_args, training_args, extra_args)


def finish_run(folder: Path, record: dict, table: Optional[str] = None, card: Optional[dict] = None) -> None:
    """The end of every recipe, on the main process, once the trained model is committed to ``folder``: the test
    record (``eval_results.json``) and, with ``card``
    ([`write_model_card`][csekit.publishing.model_card.write_model_card]'s
    ``repo_id`` and ``data_dir``), the model card (its figures, ``mteb_model_meta.json``, ``README.md`` last) are added
    beside it, each file whole or not at all; then the test table is printed."""
    write_json(folder / RESULTS_FILE, {**record, LOCAL_PATHS: local_paths(record)})
    if card is not None and "sts" in record:  # a card needs the test scores (--do_test_eval)
        write_model_card(folder, repo_id=card.get("repo_id") or f"<your-namespace>/{folder.name}", figure="missing",
                         data_dir=card.get("data_dir"))
    if table:
        print(table)


@contextlib.contextmanager
def scoring(folder: Path):
    """The scoring of a committed model: whatever stops it (an error, Ctrl-C, a kill signal turned into an
    exception) is logged with the commands that finish the folder, since the model is already in place."""
    try:
        yield
    except BaseException:
        logger.error("the scoring of the trained model did not finish; the model is in %s: score it with `csekit "
                     "evaluate %s --output %s` and write its card with `csekit card %s`", folder, folder,
                     folder / RESULTS_FILE, folder)
        raise


def commit_run(folder: RunFolder, main: bool, save: Callable[[Path], None], score: Callable[[], tuple],
               arguments: dict, card: dict, keep_checkpoints: bool) -> Optional[dict]:
    """The end every recipe shares (Trainer-based and CLSR): the trained model committed
    ([`commit_model`][csekit.trainers.runner.commit_model]); then on the main process ``score`` gives
    ``(record, table)``, [`finish_run`][csekit.recipe_run.finish_run] adds scores and card, the checkpoints go unless
    kept, and a last line names the folder and its card. An interrupted scoring says how to score the committed model
    ([`scoring`][csekit.recipe_run.scoring]). Returns the record (``None`` off the main process)."""
    where = commit_model(folder, main, save, arguments)
    if where is None:
        return None
    with scoring(where):
        record, table = score()
        if record is not None:
            finish_run(where, record, table, card=card)
    remove_checkpoints(folder, keep_checkpoints)
    card_file = where / "README.md"
    print(f"The model is in {where}" + (f"; its card: {card_file}" if card_file.is_file() else
                                        f" (no card without test scores: `csekit evaluate {where} --output "
                                        f"{where / RESULTS_FILE}`, then `csekit card {where}`)"))
    return record


def publish_run(folder, training_args) -> object:
    """The push stage: the scored folder to ``--hub_model_id`` as ``csekit push`` uploads it
    ([`csekit.publishing.hub.push_to_hub`][csekit.publishing.hub.push_to_hub]: the pickle-free set, the card
    rendered for the repository), private with ``--hub_private_repo``. Returns the commit info."""
    api = HfApi(token=training_args.hub_token)
    commit, _ = push_to_hub(folder, training_args.hub_model_id, private=bool(training_args.hub_private_repo),
                            commit_message="End of training", api=api)
    return commit


def run_recipe(recipe: TrainingRecipe, model_args, data_args, training_args, extra_args=None) -> dict:
    """Train with STS-B dev model selection, save the best model + tokenizer, score the 7 STS test sets: the stages
    [`check_run`][csekit.trainers.runner.check_run] (before any work),
    [`build_trainer`][csekit.trainers.runner.build_trainer], [`train_run`][csekit.trainers.runner.train_run],
    [`commit_run`][csekit.recipe_run.commit_run] (commit, [`score_run`][csekit.evaluation.run_scores.score_run], card),
    and with ``--push_to_hub --hub_model_id NAME`` [`publish_run`][csekit.recipe_run.publish_run].

    Returns:
        the test results ``{"STS12": ..., "avg": ...}`` (empty if ``do_test_eval`` is off).
    """
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    run = check_run(recipe, model_args, data_args, training_args, extra_args)
    trainer = build_trainer(recipe, run, model_args, data_args, training_args, extra_args)
    batch = batch_record(trainer, run.columns)
    logger.info(describe_batch(batch))
    main = trainer.is_world_process_zero()
    # the data as trained on beside its flags: each dataset's hash (and share of the steps, when several)
    data = {**group_values(data_args), "train_dataset": run.record[TRAIN_DATA]}
    arguments = dict(model_args=model_args, data_args=data, training_args=training_args,
                     **({"extra_args": extra_args} if extra_args else {}),
                     **({"resume": {"checkpoint": run.resume, "accepted_changes": run.accepted}} if run.accepted
                        else {}))
    run.folder.acquire(lock=main)
    try:
        train_run(trainer, run)
        record = commit_run(run.folder, main, lambda staging: trainer.save_model(str(staging)),
                            lambda: score_run(trainer, run.test, model_args.model_name_or_path, run.model_path,
                                              batch), arguments,
                            dict(repo_id=training_args.hub_model_id, data_dir=run.data_dir),
                            training_args.keep_checkpoints)
    finally:
        run.folder.release()
    if not main:
        return {}
    if run.publish:
        print(f"pushed to {training_args.hub_model_id}: {publish_run(run.folder.folder, training_args)}")
    return (record or {}).get("sts") or {}


def main_guard(main: Callable, argv: Optional[list] = None) -> None:
    """Run a recipe's ``main`` as ``python recipes/X.py`` / ``accelerate launch`` do, in the commands' error boundary
    ([`csekit.errors.report_errors`][csekit.errors.report_errors]): bad input ends with one line on stderr and exit
    status 2."""
    def run() -> int:
        main(argv)
        return 0

    code = report_errors(run)
    if code:
        sys.exit(code)


__all__ = ["ContrastiveRecipe", "commit_run", "finish_run", "main_guard", "publish_run", "run_recipe", "scoring"]
