"""The method registry: the one place that declares csekit's training methods.

Every list of methods in the library and in the tests derives from [`METHODS`][csekit.methods.METHODS]: the classes
``csekit``,
``csekit.modeling`` and ``csekit.trainers`` export, the configs and models ``AutoConfig`` / ``AutoModel`` find,
``csekit train``'s choices, the model-card templates, and every test parametrized over methods (the conformance
suite, ``tests/test_conformance.py``). A new method is its own files (config, model, trainer, recipe, card) plus one
[`Method`][csekit.methods.Method] entry here (``docs/add-a-method.md``).

Classes are named as ``"package.module:Name"`` strings and imported on first use, so reading the registry costs no
torch (``csekit --help`` lists the methods in a fraction of a second).
"""

import sys
from dataclasses import dataclass, field
from importlib import import_module
from typing import Optional


def load_object(reference: str):
    """The object a ``"package.module:Name"`` reference names (imported now)."""
    module, _, name = reference.partition(":")
    return getattr(import_module(module), name)


@dataclass(frozen=True)
class OneProcess:
    """How one process trains exactly what N processes train, each with its share of the batch
    ([`Method.one_process`][csekit.methods.Method]): what the conformance suite runs to compare them.

    Args:
        flags: recipe flags of both runs of the comparison.
        worker_options: options of the one-process run (``tests/dist_worker.py``): ``{"whitening_shards": 2}``
            whitens each process's share of the batch alone, as N processes each whiten their own.
        float32_inside: a part computes in float32 whatever the model's dtype, so float64 comparisons hold to
            float32 rounding.
    """

    flags: tuple = ()
    worker_options: dict = field(default_factory=dict)
    float32_inside: bool = False


@dataclass(frozen=True)
class Method:
    """One training method: its files, its defaults and what it can do.

    Args:
        name: ``csekit train NAME`` and the recipe ``accelerate launch -m csekit.recipes.NAME``; the default output
            folder is ``outputs/NAME``.
        paper: the paper the method reproduces (authors, year, title).
        title: the method's name as its paper writes it (``SimCSE``).
        cite: the paper's short citation (``Gao et al., 2021``).
        summary: what the method adds, in a few words (the method tables of README and the docs).
        config: the ``PretrainedConfig`` subclass (``"module:Class"``); its fields are the recipe's method flags.
        model: the published model class, the one ``AutoModel`` maps the config to.
        trainer: the class that trains it (a ``ContrastiveTrainer`` subclass, or CLSR's head trainer).
        recipe: the recipe module; it defines ``RECIPE`` and ``main``.
        card: the model-card template, a file of ``model_cards/`` (paper rows, equations).
        training_model: the class trained when it is not ``model`` (a training-only network around it, whose
            checkpoints keep the auxiliary parts and whose final save is ``model``).
        exports: further public classes of the method (``"module:Class"``), exported as its classes are.
        packing: the method trains on packed (padding-free) batches where the backbone allows it.
        mixed_precision: ``--bf16`` / ``--fp16`` autocast apply to its training.
        one_process: how one process trains what N processes train with their shares of the batch
            ([`OneProcess`][csekit.methods.OneProcess]; the default: the same run with the whole batch), or ``None``
            where nothing does (each process normalises its own batch and averages a per-token loss over it, as the
            authors' code under DDP).
        gradient_caching: ``--mini_batch_size`` applies to it: its model splits a batch into chunks and joins their
            outputs (``split_chunks`` / ``chunk_forward`` / ``merge_chunks``), exactly (``trainers/gradient_cache.py``).
        stochastic: the random draws of its training, ``{label: recipe flags that turn it on}``; resuming after a
            kill must repeat every one of them exactly.
        forward_draws: the draws its model's forward takes from torch's global generator besides dropout (which a
            checkpoint's random state restores, as it restores dropout's), ``{label: recipe flags that turn it
            off}``. Every other draw comes from the collator's per-example generators (``trainers/randomness.py``):
            the conformance suite checks that with dropout and these off, a step does not depend on the global
            generators at all.
        augmentations: the text augmentations its collator applies to the views after the first, ``{label: recipe
            flags that turn it on}``; the conformance suite checks that each one makes views that differ from the
            sentence (an augmentation never applied fails it).
        loss_terms: the terms its loss adds to its contrastive term, ``{label: the config field weighting it}``; the
            conformance suite checks that each weight moves the loss and the gradients.
        fields_outside_the_loss: the float settings of its config that one step's loss does not read, ``{field:
            why}``; the conformance suite checks that every other float setting, given to a model built anew,
            changes the loss of the same examples (a value hard-coded or read nowhere fails it).
        test_flags: the method flags that fit it on the tests' 2-layer, hidden-32 backbone with a batch of 8
            (``{backbone}``: that backbone's folder; ``{masked_lm}``: it with a masked-LM head, tests/conftest.py).
        test_data: what its test runs train on: ``"sentences"`` (a .txt) or ``"pairs"`` (a sent0,sent1 .csv).
        not_on_decoders: why it cannot train a decoder backbone (``DECODER_BACKBONES``: Qwen, Llama, ...), said in
            the one line that refuses one; empty where it can.
        no_lora: why its training cannot be LoRA adapters on the backbone (``--lora_r``, ``peft_config``:
            ``trainers/lora.py``), said in the one line that refuses them; empty where it trains them.
    """

    name: str
    paper: str
    title: str
    cite: str
    summary: str
    config: str
    model: str
    trainer: str
    recipe: str
    card: str
    training_model: Optional[str] = None
    exports: tuple = ()
    packing: bool = True
    mixed_precision: bool = True
    one_process: Optional[OneProcess] = OneProcess()
    gradient_caching: bool = False
    stochastic: dict = field(default_factory=lambda: {"dropout": ()})
    forward_draws: dict = field(default_factory=dict)
    augmentations: dict = field(default_factory=dict)
    loss_terms: dict = field(default_factory=dict)
    fields_outside_the_loss: dict = field(default_factory=dict)
    test_flags: tuple = ()
    test_data: str = "sentences"
    not_on_decoders: str = ""
    no_lora: str = ""

    @property
    def config_class(self) -> type:
        return load_object(self.config)

    @property
    def model_class(self) -> type:
        return load_object(self.model)

    @property
    def training_model_class(self) -> type:
        return load_object(self.training_model or self.model)

    @property
    def trainer_class(self) -> type:
        return load_object(self.trainer)

    @property
    def recipe_module(self):
        return import_module(self.recipe)

    @property
    def output_dir(self) -> str:
        return f"outputs/{self.name}"

    @property
    def classes(self) -> dict:
        """``{public name: "module:Name"}`` of every class the method exports."""
        references = (self.config, self.model, *((self.training_model,) if self.training_model else ()),
                      self.trainer, *self.exports)
        return {reference.partition(":")[2]: reference for reference in references}


METHODS: dict = {}


def register(method: Method) -> Method:
    """Add ``method`` to [`METHODS`][csekit.methods.METHODS] (a name is registered once). Its config and model are
    registered with
    ``AutoConfig`` / ``AutoModel`` too, at once when csekit's Auto registration already ran."""
    if method.name in METHODS:
        raise ValueError(f"a method named {method.name!r} is already registered")
    METHODS[method.name] = method
    modeling = sys.modules.get("csekit.modeling")  # (it may be importing this module right now)
    if getattr(modeling, "_registered", False):
        modeling.register_method(method)
    elif getattr(modeling, "_configs_registered", False):
        modeling.register_method_config(method)
    return method


def get_method(name: str) -> Method:
    """The registered method ``name`` (a `KeyError` naming the registered ones otherwise)."""
    try:
        return METHODS[name]
    except KeyError:
        raise KeyError(f"no method {name!r}; registered: {', '.join(METHODS)}") from None


def classes_in(package: Optional[str] = None) -> dict:
    """``{public name: "module:Name"}`` of the registered methods' classes whose module is in ``package`` (what that
    package exports for the methods); every method class when ``package`` is ``None``."""
    return {name: reference for method in METHODS.values() for name, reference in method.classes.items()
            if package is None or reference.startswith(f"{package}.")}


def method_of_model_type(model_type: str) -> Optional[Method]:
    """The registered method whose config has ``model_type`` (imports the configs), or ``None``."""
    return next((method for method in METHODS.values() if method.config_class.model_type == model_type), None)


def _method_of_class(kind: type, references) -> Optional[tuple]:
    """``(method, reference)`` for the nearest class in ``kind``'s MRO that a registered method names through
    ``references(method)`` (its ``"module:Name"`` strings), or ``None``: a subclass belongs to its base's method."""
    for base in getattr(kind, "__mro__", ()):
        name = f"{base.__module__}:{base.__qualname__}"
        for method in METHODS.values():
            if name in references(method):
                return method, name
    return None


def method_of_trainer(trainer_class: type) -> Optional[Method]:
    """The registered method that ``trainer_class`` (or its nearest registered base) trains, or ``None``."""
    found = _method_of_class(trainer_class, lambda method: (method.trainer,))
    return found[0] if found else None


def method_of_model(model_class: type) -> Optional[tuple]:
    """``(method, trained)`` for a model class (or its nearest registered base): ``trained`` tells whether it is the
    class the method's trainer trains (``training_model``, else ``model``) rather than its published encoder."""
    found = _method_of_class(model_class, lambda method: (method.training_model or method.model, method.model))
    return (found[0], found[1] == (found[0].training_model or found[0].model)) if found else None


def method_table(link: str) -> str:
    """The Markdown table of the registered methods (README's, the docs' front page): each method's title linked
    to its page (``link`` + ``NAME.md``), summary, citation, model, trainer and recipe name."""
    lines = ["| method | paper | model trained (published as) | trainer | recipe (`csekit train METHOD`) |",
             "|---|---|---|---|---|"]
    for method in METHODS.values():
        model, trainer = (reference.partition(":")[2] for reference in (method.model, method.trainer))
        trained = f"`{method.training_model.partition(':')[2]}` (`{model}`)" if method.training_model else f"`{model}`"
        lines.append(f"| [{method.title}]({link}{method.name}.md): {method.summary} | {method.cite} | {trained} | "
                     f"`{trainer}` | `{method.name}` |")
    return "\n".join(lines)


def _takes_matryoshka(method: Method) -> bool:
    config = method.config_class
    return "matryoshka_dims" in vars(config()) and "matryoshka_dims" not in getattr(config, "fields_without_flags", ())


def flag_table() -> str:
    """The Markdown table of which registered method takes each shared training flag (the docs' training page), read
    from each entry's capabilities and its config's fields (imports the configs)."""
    def mark(value: bool) -> str:
        return "yes" if value else "no"

    lines = ["| method | `--matryoshka_dims` | `--mini_batch_size`, `--mini_batch_tokens` | packed batches "
             "(`--padding_free`) | `--bf16`, `--fp16` | decoder backbones | `--lora_r` | N processes (`accelerate "
             "launch`) |", "|---|---|---|---|---|---|---|---|"]
    for method in METHODS.values():
        processes = ("train what one process trains with the whole batch" if method.one_process is not None else
                     "each process normalises its own batch, as the authors' code under DDP")
        lines.append(f"| {method.title} | {mark(_takes_matryoshka(method))} | {mark(method.gradient_caching)} | "
                     f"{mark(method.packing)} | {mark(method.mixed_precision)} | {mark(not method.not_on_decoders)} | "
                     f"{mark(not method.no_lora)} | {processes} |")
    return "\n".join(lines)


def titles_taking(columns: tuple) -> str:
    """The titles of the registered methods whose trainer trains on data with ``columns`` (``("sent0", "sent1")``;
    the trainer's ``data_columns``), comma-separated (imports the trainers)."""
    return ", ".join(method.title for method in METHODS.values()
                     if tuple(columns) in getattr(method.trainer_class, "data_columns", ()))


# ------------------------------------------------------------------------------------------------ the methods
register(Method(
    name="simcse",
    paper="Gao, Yao & Chen, 2021, SimCSE: Simple Contrastive Learning of Sentence Embeddings",
    title="SimCSE",
    cite="Gao et al., 2021",
    summary="the baseline: dropout views, in-batch negatives",
    config="csekit.modeling.configuration_simcse:SimCSEConfig",
    model="csekit.modeling.modeling_simcse:SimCSEModel",
    trainer="csekit.trainers.simcse:SimCSETrainer",
    recipe="csekit.recipes.simcse",
    card="simcse.md",
    gradient_caching=True,
    stochastic={"dropout": ()},
    test_flags=("--pooler_type", "cls"),
))
register(Method(
    name="whitenedcse",
    paper="Zhuo et al., 2023, WhitenedCSE: Whitening-based Contrastive Learning of Sentence Embeddings",
    title="WhitenedCSE",
    cite="Zhuo et al., 2023",
    summary="shuffled group whitening + multi-positive loss",
    config="csekit.modeling.configuration_whitenedcse:WhitenedCSEConfig",
    model="csekit.modeling.modeling_whitenedcse:WhitenedCSEModel",
    trainer="csekit.trainers.whitenedcse:WhitenedCSETrainer",
    recipe="csekit.recipes.whitenedcse",
    card="whitenedcse.md",
    # each process whitens its own batch, as the authors' code does; the float32 whitening's rounding, which Adam's
    # first steps turn into +-lr for near-zero gradients, stays at rounding level with SGD and temperature 1
    one_process=OneProcess(flags=("--optim", "sgd", "--temperature", "1.0"), worker_options={"whitening_shards": 2},
                           float32_inside=True),
    gradient_caching=True,
    stochastic={"shuffled groups": (), "dropout positives": ("--positive_source", "dropout")},
    # the channel shuffle of shuffled group whitening: torch.randperm in the authors' forward
    forward_draws={"group shuffles": ("--whitening", "group")},
    fields_outside_the_loss={"whitening_momentum": "it updates the running whitening statistics that inference "
                                                   "uses; training whitens each batch by its own statistics"},
    # 16 groups of 2 channels: fewer channels per group than the tests' per-process batches
    test_flags=("--pooler_type", "cls", "--num_groups", "16"),
))
register(Method(
    name="cmlm_cse",
    paper="Zhang & Chen, 2023, CMLM-CSE: Based on Conditional MLM Contrastive Learning for Sentence Embeddings",
    title="CMLM-CSE",
    cite="Zhang & Chen, 2023",
    summary="SimCSE + conditional-MLM auxiliary network",
    config="csekit.modeling.configuration_cmlm_cse:CMLMCSEConfig",
    model="csekit.modeling.modeling_cmlm_cse:CMLMCSEModel",
    training_model="csekit.modeling.modeling_cmlm_cse:CMLMCSEForPreTraining",
    trainer="csekit.trainers.cmlm_cse:CMLMCSETrainer",
    exports=("csekit.trainers.cmlm_cse:CMLMCSECollator",),
    recipe="csekit.recipes.cmlm_cse",
    card="cmlm_cse.md",
    gradient_caching=True,
    stochastic={"mlm masks": (), "word repetition": ("--contrastive_augmentation", "word_repetition"),
                "drop one word": ("--contrastive_augmentation", "drop_one_word")},
    augmentations={"word repetition": ("--contrastive_augmentation", "word_repetition"),
                   "drop one word": ("--contrastive_augmentation", "drop_one_word")},
    loss_terms={"contrastive": "contrastive_weight", "conditional MLM": "mlm_weight"},
    fields_outside_the_loss={"hard_negative_weight": "it weights hard negatives, and CMLM-CSE trains on one text "
                                                     "column"},
    # 1 of the 2 blocks frozen as the extractor, 1 fusion block; a weight that lets the MLM term move the encoder
    test_flags=("--pooler_type", "cls", "--extractor_layers", "1", "--fusion_layers", "1", "--mlm_weight", "0.5"),
    not_on_decoders="its conditional MLM predicts masked tokens from both sides, which needs a masked language "
                    "model (BERT, RoBERTa, ...)",
    no_lora="freezes part of the encoder as its auxiliary network's extractor and trains the rest whole, a split "
            "that adapters on every layer would change",
))
register(Method(
    name="esimcse",
    paper="Wu et al., 2022, ESimCSE: Enhanced Sample Building Method for Contrastive Learning of Unsupervised Sentence "
          "Embedding",
    title="ESimCSE",
    cite="Wu et al., 2022",
    summary="SimCSE + word-repeated positives + a momentum queue of negatives",
    config="csekit.modeling.configuration_esimcse:ESimCSEConfig",
    model="csekit.modeling.modeling_esimcse:ESimCSEModel",
    training_model="csekit.modeling.modeling_esimcse:ESimCSEForPreTraining",
    trainer="csekit.trainers.esimcse:ESimCSETrainer",
    exports=("csekit.trainers.esimcse:ESimCSECollator", "csekit.modeling.momentum:MomentumEncoder"),
    recipe="csekit.recipes.esimcse",
    card="esimcse.md",
    gradient_caching=True,
    stochastic={"subword repetition": (), "word repetition": ("--repetition_unit", "word")},
    augmentations={"subword repetition": (), "word repetition": ("--repetition_unit", "word")},
    fields_outside_the_loss={
        "momentum": "it moves the momentum encoder after each update, so a step's loss reads it one step later "
                    "(tests/test_esimcse.py checks the update)",
        "hard_negative_weight": "it weights hard negatives, and ESimCSE trains on one text column"},
    # a queue of 2 batches of the tests' 8 sentences: full from the third step on
    test_flags=("--pooler_type", "cls", "--queue_size", "16"),
    no_lora="keeps a momentum copy of the whole encoder, which adapters on the encoder alone would not follow",
))
register(Method(
    name="diffcse",
    paper="Chuang et al., 2022, DiffCSE: Difference-based Contrastive Learning for Sentence Embeddings",
    title="DiffCSE",
    cite="Chuang et al., 2022",
    summary="SimCSE + conditional replaced-token detection",
    config="csekit.modeling.configuration_diffcse:DiffCSEConfig",
    model="csekit.modeling.modeling_diffcse:DiffCSEModel",
    training_model="csekit.modeling.modeling_diffcse:DiffCSEForPreTraining",
    trainer="csekit.trainers.diffcse:DiffCSETrainer",
    exports=("csekit.trainers.diffcse:DiffCSECollator",),
    recipe="csekit.recipes.diffcse",
    card="diffcse.md",
    # the replaced-token loss averages over the padded batch, padding included (the authors' code)
    packing=False,
    # each process batch-normalises its own sentences and averages its own replaced-token loss (their DDP)
    one_process=None,
    # not exact in chunks: the projection head's batch normalisation and the discriminator's input need the whole
    # batch's sentence vectors before any chunk's replaced-token loss can be computed
    gradient_caching=False,
    stochastic={"dropout and masks": ()},
    loss_terms={"replaced-token detection": "lambda_weight"},
    fields_outside_the_loss={"hard_negative_weight": "it weights hard negatives, and DiffCSE trains on one text "
                                                     "column"},
    # the generator: the tests' backbone with a fresh masked-LM head (``{backbone}``: tests/conftest.py)
    test_flags=("--pooler_type", "cls", "--generator_name_or_path", "{masked_lm}"),
    not_on_decoders="its replaced-token detection reads every token in both directions and its generator is a "
                    "masked language model; use an encoder (BERT, RoBERTa, ...)",
    no_lora="trains a generator and a discriminator beside the encoder, which adapters on the encoder alone would "
            "leave out",
))
register(Method(
    name="clsr",
    paper="Qiu, Ding & Chen, Contrastive Learning of Sentence Representations",
    title="CLSR",
    cite="Qiu, Ding & Chen",
    summary="MLP + projection on a frozen encoder (cached embeddings)",
    config="csekit.modeling.configuration_clsr:CLSRConfig",
    model="csekit.modeling.modeling_clsr:CLSRModel",
    trainer="csekit.trainers.clsr:CLSRTrainer",
    exports=("csekit.trainers.clsr:CLSRTrainingArguments",),
    recipe="csekit.recipes.clsr",
    card="clsr.md",
    packing=False,  # the frozen encoder runs once per sentence (cached); the head trains on vectors
    mixed_precision=False,  # the head's few small matrix products run in float32
    stochastic={"pair order": ()},
    test_flags=("--num_train_epochs", "3", "--per_device_train_batch_size", "16", "--warmup_epochs", "1",
                "--eval_epochs", "1", "--save_epochs", "1"),
    test_data="pairs",
    no_lora="trains a head over a frozen encoder's cached vectors, so no backbone weight trains",
))

__all__ = ["METHODS", "Method", "OneProcess", "classes_in", "flag_table", "get_method", "load_object",
           "method_of_model", "method_of_model_type", "method_of_trainer", "method_table", "register", "titles_taking"]
