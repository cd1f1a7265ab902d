"""Model cards for csekit model folders, rendered from what the folder records about itself.

Every reproduced number comes from the folder's ``eval_results.json`` (written by the recipe runner and by the
card's own geometry evaluation); hyperparameters come from ``config.json`` and ``training_args.json`` (the JSON
twin of ``training_args.bin`` written by [`csekit.recipe_run.run_recipe`][csekit.recipe_run.run_recipe]; the
pickle is never read). The
papers' numbers live in the per-family templates of ``model_cards/`` as the *paper* rows, with their source.

    # a huggingface_hub.ModelCard
    card = render_model_card("outputs/simcse", repo_id="me/simcse-minilm")
    write_model_card("outputs/simcse")  # README.md (+ figure if missing)
"""

import json
import re
import shlex
from importlib.resources import files
from pathlib import Path
from typing import Optional

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from markupsafe import Markup

from ..atomic import write_json, write_text
from ..errors import DataError
from ..evaluation.sts import STS_COLUMNS, STS_SHORT_NAMES, STS_TASKS, senteval_tasks
from ..loading import ARGUMENTS_FILE, RESULTS_FILE, resolve_model_path
from ..methods import method_of_model_type
from ..modeling.adapters import ADAPTER_CONFIG, ADAPTER_FOLDER
from ..options import FLAG_NAMES
from ..preflight import check_output_file, load_tokenizer
from .figure import CURVE_FILE, FIGURE_FILE, MAX_SENTENCES
from .model_folder import (
    PATHS_NOTE,
    FolderConfig,
    base_model_id,
    load_eval_record,
    read_json,
    recorded_local_paths,
    strip_local_paths,
)
from .mteb_meta import embedding_dimension, write_model_meta

MODEL_CARDS_DIR = Path(str(files("csekit.model_cards")))  # the design card's model_cards/, shipped as package data
GENERIC_TEMPLATE = "generic.md"


def card_template(model_type: str) -> str:
    """The template of ``model_cards/`` for a config's ``model_type``: the registered method's card (paper rows,
    equations), or the generic card for any other encoder."""
    method = method_of_model_type(model_type)
    return method.card if method is not None else GENERIC_TEMPLATE


# SentEval's STS test sets -> the MTEB tasks that contain them (a training set that overlaps one overlaps the other)
SENTEVAL_TO_MTEB = {"STSBenchmark": "STSBenchmark", "SICKRelatedness": "SICK-R",
                    **{f"STS{year}": f"STS{year}" for year in range(12, 17)}}
# training-data names (substrings of the recipe's data arguments) -> Hub dataset ids for the card metadata
TRAINING_DATASETS = {
    "wiki1m": "princeton-nlp/datasets-for-simcse", "nli": "stanfordnlp/snli", "stsb": "mteb/stsbenchmark-sts",
}
TRAINING_KEYS = (
    "learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps",
    "warmup_steps", "warmup_ratio", "weight_decay", "lr_scheduler_type", "eval_steps", "metric_for_best_model",
    "bf16", "fp16", "seed",
)
COMPARISON_FILE = "comparison.md"
# every recipe trains and evaluates on English text (wiki1m, NLI, SentEval), as the papers do
CARD_LANGUAGE = ["en"]
# the Hub's sentence-similarity widget: a sentence and the candidates it is compared with (not evaluation data)
WIDGET = [
    {"source_sentence": "A man is playing a guitar.",
     "sentences": ["Someone is playing an instrument.", "A man is playing a flute.", "A woman is slicing an onion."]},
    {"source_sentence": "The cat sleeps on the sofa.",
     "sentences": ["A cat is napping on a couch.", "A dog sleeps in the garden.", "The sofa is for sale."]},
    {"source_sentence": "How do I reset my password?",
     "sentences": ["I forgot my password and need a new one.", "How do I change my username?",
                   "The weather is nice today."]},
]
NO_SENTENCE_TRANSFORMERS = ("its inference is not a backbone followed by last-layer [CLS] or mean pooling and Linear "
                            "layers (a multi-layer pooler, or a whitening head), so the folder has no modules.json")
BIDIRECTIONAL_DECODER = ("its decoder attends bidirectionally (LLM2Vec's conversion), and sentence-transformers' "
                         "Transformer module would load it causal, so the folder has no modules.json")


# characters that change what Markdown (CommonMark + GitHub tables) shows: escaped in every value a card prints; an
# underscore inside a word (``learning_rate``) cannot open or close emphasis there, so it stays as it is
MARKDOWN_SPECIAL = re.compile(r"([\\`*{}\[\]<>#|~&!]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def markdown_text(value) -> str:
    """``value`` as literal Markdown text on one line: every Markdown character backslash-escaped (a record's or a
    cache's string, a folder's or a task's name can never add markup, a link, HTML or a table cell to the card)."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(value).splitlines()))


def code_span(value) -> Markup:
    """``value`` as one inline code span: fenced by more backticks than it holds in a row, ``|`` escaped (GitHub
    tables split cells on it even inside code), on one line."""
    text = " ".join(str(value).splitlines()).replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Markup(f"{fence}{pad}{text}{pad}{fence}")


def python_string(value) -> Markup:
    """``value`` as a Python string literal inside a fenced code block (a snippet a reader runs): quoted and
    escaped, so a crafted folder or repository name stays one string and cannot add code; no backtick."""
    return Markup(json.dumps(str(value)).replace("`", "\\u0060"))


def shell_word(value) -> Markup:
    """``value`` as one shell word inside a fenced code block (a command a reader runs), quoted where it must be;
    no backtick."""
    return Markup(shlex.quote(" ".join(str(value).splitlines()).replace("`", "'")))


def escaped(value):
    """The card template's ``finalize``: every printed string is
    [`markdown_text`][csekit.publishing.model_card.markdown_text] unless a filter made it markup (``code``,
    ``python_string``, ``shell_word``) or it is the card's own YAML header."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return markdown_text(value)
    return value


def card_environment() -> jinja2.Environment:
    """The Jinja environment of every card: strict, Markdown-escaping (`escaped`), with ``code``, ``python_string`` and
    ``shell_word`` filters."""
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(MODEL_CARDS_DIR), undefined=jinja2.StrictUndefined,
                                     keep_trailing_newline=True, finalize=escaped)
    environment.filters.update(code=code_span, python_string=python_string, shell_word=shell_word)
    return environment


def hyperparameter_rows(config: FolderConfig, arguments: Optional[dict]) -> list:
    """``(name, value, source)`` rows: the config's method fields, then the recipe arguments not already shown."""
    fields = config.method_fields()
    rows = [(name, value, "config.json") for name, value in fields.items()]
    if arguments:
        shown = {FLAG_NAMES.get(name, name) for name in fields}
        for name, value in arguments.get("model_args", {}).items():
            if name not in shown:
                rows.append((name, value, "training_args.json (model)"))
        for name, value in arguments.get("data_args", {}).items():
            rows.append((name, value, "training_args.json (data)"))
        training = arguments.get("training_args", {})
        rows.extend((name, training[name], "training_args.json") for name in TRAINING_KEYS if name in training)
    return rows


def training_datasets(arguments: Optional[dict]) -> Optional[list]:
    values = " ".join(str(value) for value in (arguments or {}).get("data_args", {}).values())
    found = [dataset for key, dataset in TRAINING_DATASETS.items() if key in values]
    return found or None


def other_result_rows(record: dict) -> list:
    """``(name, formatted value)`` for the non-STS suites present in the record."""
    rows = []
    for suite in ("transfer", "clustering"):
        if "avg" in record.get(suite, {}):
            rows.append((f"{suite} avg (accuracy x 100)", f"{record[suite]['avg']:.2f}"))
    for name in ("alignment", "uniformity", "isoscore"):
        if name in record.get("geometry", {}):
            rows.append((name, f"{record['geometry'][name]:.4f}"))
    return rows


def sts_eval_results(record: dict, contaminated: set) -> list:
    """The SentEval STS test scores as model-index entries, under SentEval's names (not a Hub dataset id: SentEval's
    files are not MTEB's) with the metric sentence-transformers' cards use (``spearman_cosine``): only the tasks the
    record's protocol shows were scored on SentEval's own test files
    ([`senteval_tasks`][csekit.evaluation.sts.senteval_tasks]); any other data's scores stay in the card's text."""
    senteval = senteval_tasks(record.get("protocol", {}).get("sts"))
    return [
        EvalResult(task_type="sentence-similarity", task_name="Semantic Similarity", dataset_type=f"SentEval/{task}",
                   dataset_name=f"SentEval {STS_SHORT_NAMES.get(task, task)}", dataset_split="test",
                   metric_type="spearman_cosine", metric_name="Spearman (cosine) x100", metric_value=score)
        for task, score in record["sts"].items() if task in senteval and task not in contaminated
    ]


def mteb_eval_results(record: dict, contaminated: set) -> list:
    """The MTEB scores (``csekit evaluate --mteb``) as model-index entries, under the dataset id and revision mteb
    scored."""
    mteb_tasks = record.get("protocol", {}).get("mteb", {}).get("tasks", {})
    return [
        EvalResult(
            task_type="sentence-similarity", task_name=f"MTEB {task}", dataset_type=mteb_tasks[task]["dataset"],
            dataset_name=f"MTEB {task}", dataset_split=mteb_tasks[task]["splits"][0],
            dataset_revision=mteb_tasks[task]["revision"], metric_type=mteb_tasks[task]["main_score"],
            metric_name=f"{mteb_tasks[task]['main_score']} (x100)", metric_value=score,
        )
        for task, score in record.get("mteb", {}).items() if task in mteb_tasks and task not in contaminated
    ]


def build_card_data(title: str, config, record: dict, arguments: Optional[dict], license: str,
                    sentence_transformers: bool) -> ModelCardData:
    """The card's metadata, the fields sentence-transformers' own cards carry: tags, ``widget`` examples for the
    Hub's similarity widget, ``language``, ``base_model`` (a Hub backbone), ``datasets``, and a model-index with the
    SentEval STS test scores and, after ``csekit evaluate FOLDER --mteb``, the MTEB scores. Tasks the record marks
    ``contaminated`` (training data overlapped their test set) are left out of the model-index."""
    method = config.model_type.removeprefix("csekit-")
    contaminated = set(record.get("contaminated", {}))
    eval_results = (sts_eval_results(record, contaminated)
                    + mteb_eval_results(record, {SENTEVAL_TO_MTEB.get(task, task) for task in contaminated})) or None
    if sentence_transformers:  # the tags sentence-transformers' own cards carry, so the Hub shows its widget
        library, pipeline = "sentence-transformers", "sentence-similarity"
        tags = ["sentence-transformers", "sentence-similarity", "feature-extraction", "dense"]
    else:
        library, pipeline, tags = "transformers", "feature-extraction", ["feature-extraction", "sentence-similarity"]
    return ModelCardData(
        model_name=title, library_name=library, pipeline_tag=pipeline, license=license, language=CARD_LANGUAGE,
        tags=tags + ["csekit", method, "sentence-embeddings", "custom_code"]
        + (["matryoshka"] if config.values.get("matryoshka_dims") else []),  # the trained sizes are in config.json
        base_model=base_model_id(arguments, record), datasets=training_datasets(arguments),
        eval_results=eval_results, widget=WIDGET if sentence_transformers else None,
    )


def framework_versions(record: dict) -> Optional[dict]:
    """The library versions the evaluation recorded (``eval_results.json`` ``protocol.versions``)."""
    return record.get("protocol", {}).get("versions") or None


def short_name(folder: Path, repo_id: Optional[str]) -> str:
    """The model's name in its card: the repository id's last part, else the folder's name."""
    return (repo_id or Path(folder).resolve().name).split("/")[-1]


def render_model_card(model_dir, repo_id: Optional[str] = None, license: str = "apache-2.0") -> ModelCard:
    """Render the card of a csekit model folder (nothing is written).

    Args:
        model_dir: folder with ``config.json`` and ``eval_results.json`` (``training_args.json``,
            ``alignment_uniformity.png`` and ``comparison.md`` are used when present).
        repo_id: Hub id shown in the loading snippets; default ``<your-namespace>/<folder name>``.
        license: the card's license (that of the backbone's weights).
    """
    folder = Path(model_dir)
    config = FolderConfig(folder)
    raw_record = load_eval_record(folder)
    raw_arguments = read_json(folder / ARGUMENTS_FILE) if (folder / ARGUMENTS_FILE).is_file() else None
    replaced, recorded = {}, recorded_local_paths(folder)  # what the card shows is what is published: no local path
    record = strip_local_paths(raw_record, replaced, recorded)
    arguments = strip_local_paths(raw_arguments, replaced, recorded) if raw_arguments is not None else None
    short = short_name(folder, repo_id)
    repo_id = repo_id or f"<your-namespace>/{short}"
    encoder = config.encoder
    template = card_environment().get_template(card_template(config.model_type))
    comparison = folder / COMPARISON_FILE
    adapter = folder / ADAPTER_FOLDER / ADAPTER_CONFIG  # --save_adapter's adapter folder
    # save_pretrained writes the sentence-transformers files exactly when the model's inference allows them
    st_problem = None if (folder / "modules.json").is_file() else (
        BIDIRECTIONAL_DECODER if config.bidirectional else NO_SENTENCE_TRANSFORMERS)
    content = template.render(
        card_data=Markup(build_card_data(short, config, raw_record, raw_arguments, license,
                                                      st_problem is None).to_yaml()),  # Hub ids, no paths
        title=short,
        repo_id=repo_id,
        short_name=short,
        model_type=config.model_type,
        class_name=(config.architectures or ["?"])[0],
        backbone=f"{encoder.get('model_type')} ({encoder.get('num_hidden_layers')} layers, hidden "
                 f"{encoder.get('hidden_size')})",
        pooler=config.pooler_type,
        prompt=config.default_prompt,
        hyperparameters=hyperparameter_rows(config, arguments),
        training_seconds=record.get("wall_seconds"),
        batch=record.get("batch"),
        sts_columns=STS_COLUMNS,
        sts=record["sts"],
        base_sts=record.get("base_sts"),
        base_pooler=record.get("base_pooler"),
        contaminated=record.get("contaminated", {}),
        other_results=other_result_rows(record),
        figure=Markup(FIGURE_FILE) if (folder / FIGURE_FILE).is_file() else None,
        figure_numbers=record.get("figure"),
        curve=Markup(CURVE_FILE) if (folder / CURVE_FILE).is_file() else None,
        sentence_transformers_problem=st_problem,
        adapter_base=read_json(adapter).get("base_model_name_or_path") if adapter.is_file() else None,
        versions=framework_versions(record),
        sts_aggregations=record.get("sts_aggregations"),
        sts_protocol=record.get("protocol", {}).get("sts"),
        not_senteval=[task for task in STS_TASKS if task not in senteval_tasks(record.get("protocol", {}).get("sts"))],
        mteb=record.get("mteb"),
        matryoshka_sts=record.get("matryoshka_sts"),
        embedding_size=embedding_dimension(folder, config),
        # comparison.md is Markdown the user placed there (`csekit compare ... > comparison.md`): shown as written
        comparison=Markup(comparison.read_text().strip()) if comparison.is_file() else None,
    )
    return ModelCard(content + (PATHS_NOTE if replaced else ""))


def evaluate_figure(model_dir, data_dir=None, batch_size: int = 128,
                    max_sentences: Optional[int] = MAX_SENTENCES) -> dict:
    """Encode with the folder's model, draw ``alignment_uniformity.png`` and record its numbers in
    ``eval_results.json`` under ``figure`` (a sample's numbers; ``geometry`` stays the full evaluation's)."""
    from ..data import resolve_data_dir

    folder = Path(model_dir)
    record = load_eval_record(folder)
    from ..evaluation.encoders import load_embedder
    from .figure import alignment_uniformity_figure

    embed, _ = load_embedder(str(folder), batch_size=batch_size)
    numbers = alignment_uniformity_figure(embed, resolve_data_dir(data_dir), folder / FIGURE_FILE,
                                          max_sentences=max_sentences)
    record["figure"] = numbers
    write_json(folder / RESULTS_FILE, record)
    return numbers


def write_model_card(
    model, repo_id: Optional[str] = None, license: str = "apache-2.0", figure: str = "missing", data_dir=None,
    output=None, figure_sentences: Optional[int] = MAX_SENTENCES,
) -> Path:
    """Render the card of ``model`` and write it (atomically); returns the card's path.

    Args:
        model: a csekit model folder (the card goes to its ``README.md`` by default) or a Hub id of a csekit model
            (read through the Hugging Face cache; ``output`` is then required and ``repo_id`` defaults to the id).
        figure: ``missing`` (draw ``alignment_uniformity.png`` into a local folder when absent), ``always``,
            ``never``. A Hub model's card shows the figure only when the repository has one.
        output: where the card goes instead of ``<folder>/README.md``.
        figure_sentences: STS-B train sentences the figure encodes (a seeded sample; ``None``: all of them).

    A record with a ``training_curve`` gets ``training_curve.png`` (loss and dev STS per logged step) when it is
    missing from a local folder, and a local folder's card comes with ``mteb_model_meta.json``
    ([`write_model_meta`][csekit.publishing.mteb_meta.write_model_meta]; its revision is set by ``csekit push``).
    """
    if figure not in ("missing", "always", "never"):
        raise DataError(f"figure must be missing, always or never, not {figure!r}")
    output = check_output_file(output, inputs=[model]) if output else None  # before any encoding
    local = Path(model).is_dir()
    folder = Path(resolve_model_path(str(model)))  # a path that is no model folder fails here, naming it
    draw = local and (figure == "always" or (figure == "missing" and not (folder / FIGURE_FILE).is_file()))
    if draw:  # the figure encodes with the tokenizer: refused when it cannot load
        load_tokenizer(str(model), folder)
    elif not (folder / "tokenizer_config.json").is_file():  # the card's snippets need it
        raise DataError(f"{folder}: no tokenizer (tokenizer_config.json); save the tokenizer next to the model")
    if not local:
        if output is None:
            raise DataError(f"{model}: the card of a Hub model is written to --output FILE (the cache is read-only)")
        repo_id = repo_id or model
    curve = load_eval_record(folder).get("training_curve")  # fails on a bad folder before any encoding
    if draw:
        evaluate_figure(folder, data_dir, max_sentences=figure_sentences)
    if local and curve and not (folder / CURVE_FILE).is_file():
        from .figure import training_curve_figure

        training_curve_figure(curve, folder / CURVE_FILE)
    card = write_text(output or folder / "README.md", str(render_model_card(folder, repo_id, license)))
    if local and output is None:  # mteb's description of the model, for a leaderboard submission
        published = repo_id if repo_id and not repo_id.startswith("<") else None
        write_model_meta(folder, repo_id=published, name=f"csekit/{short_name(folder, repo_id)}", license=license)
    return card


__all__ = [
    "card_template", "MODEL_CARDS_DIR", "evaluate_figure", "load_eval_record", "render_model_card",
    "write_model_card",
]
