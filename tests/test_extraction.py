"""Training-free extraction: post-processing, idf, biases, prompts, static models, the cached grid, and the CLI."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
from transformers import AutoModel, PreTrainedTokenizerFast

from conftest import REPO_ROOT, tiny_bert_config
from csekit.cli import main
from csekit.data import read_reference_corpus
from csekit.errors import DataError
from csekit.extraction.extractor import (
    ExtractionSetting,
    Extractor,
    HiddenStateCache,
    TransformerSource,
    resolve_layers,
)
from csekit.extraction.idf import bias_token_table, inverse_document_frequency, normalized_token_weights, tokenize_ids
from csekit.extraction.postprocessing import parse_postprocessing
from csekit.extraction.prompts import mask_token_weights, resolve_template
from csekit.extraction.settings import TEMPLATES
from csekit.extraction.static_models import AveragedStaticSource, MixedSource, RandomEmbeddingSource
from csekit.loading import resolve_device
from csekit.modeling.pooling import pool

SENTENCES = [
    "a man is playing a guitar .",
    "a woman is slicing an onion .",
    "the kids are running outside in the sunshine .",
    "stock markets fell sharply on tuesday .",
    "a dog jumps over the fence .",
    "two men are playing chess in the park .",
]


def post(spec, x, reference=None):
    return parse_postprocessing(spec).fit_transform(x, reference)


@pytest.fixture(scope="module")
def data():
    return np.random.default_rng(0).normal(size=(200, 6)) @ np.random.default_rng(1).normal(size=(6, 6)) + 3.0


# --------------------------------------------------------------------------------------------- post-processing
def test_zscore_matches_numpy(data):
    np.testing.assert_allclose(post("zscore", data), (data - data.mean(0)) / data.std(0), atol=1e-10)


def test_zscore_fitted_on_reference(data):
    reference = data[:50] * 2 + 1
    expected = (data - reference.mean(0)) / reference.std(0)
    np.testing.assert_allclose(post("zscore^W", data, reference), expected, atol=1e-10)


def test_quantile_uniform_is_rank_over_n_minus_one(data):
    ranks = data.argsort(0).argsort(0) / (len(data) - 1)
    with pytest.warns(UserWarning, match="n_quantiles"):  # 1000 quantiles requested, 200 samples
        np.testing.assert_allclose(post("quantile-u", data), ranks, atol=1e-7)


def test_whitening_identity_covariance_and_mahalanobis(data):
    white = post("whiten", data)
    np.testing.assert_allclose(np.cov(white, rowvar=False, bias=True), np.eye(6), atol=1e-8)
    precision = np.linalg.inv(np.cov(data, rowvar=False, bias=True))
    difference = data[0] - data[1]
    np.testing.assert_allclose(((white[0] - white[1]) ** 2).sum(), difference @ precision @ difference, rtol=1e-8)


def test_abtt_removes_top_components(data):
    centred = data - data.mean(0)
    top = np.linalg.svd(centred, full_matrices=False)[2][:2]
    np.testing.assert_allclose(post("abtt-2", data), centred - centred @ top.T @ top, atol=1e-8)


def test_normalize_and_chain_order(data):
    np.testing.assert_allclose(post("normalize", data), data / np.linalg.norm(data, axis=1, keepdims=True))
    chained = post("zscore+normalize", data)
    z = (data - data.mean(0)) / data.std(0)
    np.testing.assert_allclose(chained, z / np.linalg.norm(z, axis=1, keepdims=True), atol=1e-10)
    assert str(parse_postprocessing("quantile-u^W+normalize")) == "quantile-u^W+normalize"
    np.testing.assert_array_equal(post("none", data), data)


@pytest.mark.parametrize("spec", ["foo", "abtt-0", "abtt-x", "whiten^X", "zscore+"])
def test_bad_postprocessing_rejected(spec):
    with pytest.raises(DataError, match="post-processing step"):
        parse_postprocessing(spec)


def test_reference_step_needs_reference(data):
    with pytest.raises(DataError, match="reference"):
        post("whiten^W", data)


# --------------------------------------------------------------------------------------------- idf and biases
def test_idf_formula_and_unseen_tokens():
    idf = inverse_document_frequency([[1, 2, 2], [1, 3], [1, 2]], vocab_size=5)
    np.testing.assert_allclose(idf, np.log([3 / 1, 3 / 3, 3 / 2, 3 / 1, 3 / 1]), rtol=1e-6)


def test_idf_weights_sum_to_one(tokenizer):
    ids = tokenize_ids(tokenizer, SENTENCES)
    table = torch.from_numpy(inverse_document_frequency(ids, len(tokenizer)))
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    weights = normalized_token_weights(batch["input_ids"], batch["attention_mask"], table)
    torch.testing.assert_close(weights.sum(1), torch.ones(len(SENTENCES)))
    assert float(weights[batch["attention_mask"] == 0].abs().sum()) == 0.0
    # [CLS]/[SEP] occur in every text: idf 0
    assert float(weights[:, 0].abs().sum()) == 0.0


def test_bias_table(tokenizer):
    keep = bias_token_table(tokenizer, tokenize_ids(tokenizer, SENTENCES * 3), top_frequent=3)  # ".", "a", "the"
    vocab = tokenizer.get_vocab()
    for dropped in ("[CLS]", "[SEP]", ",", ".", "##ing", "a", "the"):
        assert keep[vocab[dropped]] == 0, dropped
    for kept in ("guitar", "onion", "fence", "is"):
        assert keep[vocab[kept]] == 1, kept


# --------------------------------------------------------------------------------------------- prompts
def test_template_places_sentence_and_masks(tokenizer):
    template = resolve_template("T4")
    text = template.fill(["a man plays"], tokenizer.mask_token)[0]
    assert text == (
        'This sentence from the dictionary: "a man plays" means "[MASK]" and is about [MASK], '
        "which is a synonym for [MASK]."
    )
    prefix_ids = tokenizer('This sentence from the dictionary: "', add_special_tokens=False)["input_ids"]
    sentence_ids = tokenizer("a man plays", add_special_tokens=False)["input_ids"]
    ids = tokenizer(text)["input_ids"]
    start = 1 + len(prefix_ids)
    assert ids[start : start + len(sentence_ids)] == sentence_ids
    weights = mask_token_weights(torch.tensor([ids]), tokenizer, template.mask_count)
    assert weights.sum() == 3 and all(ids[i] == tokenizer.mask_token_id for i in weights[0].nonzero()[:, 0])


def tiny_roberta_tokenizer():
    """A byte-level BPE tokenizer with RoBERTa's special tokens, trained in code (no RoBERTa files offline)."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    backend.train_from_iterator(SENTENCES + list(TEMPLATES.values()), trainer)
    backend.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>",
        mask_token="<mask>",
    )


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_mask_positions_bert_and_roberta(tokenizer, name):
    template = resolve_template(name)
    for tok in (tokenizer, tiny_roberta_tokenizer()):
        texts = template.fill(SENTENCES[:2], tok.mask_token)
        assert all(tok.mask_token in t and SENTENCES[i] in t for i, t in enumerate(texts))
        batch = tok(texts, padding=True, return_tensors="pt")
        weights = mask_token_weights(batch["input_ids"], tok, template.mask_count)
        assert weights.sum(1).tolist() == [template.mask_count] * 2


def test_truncated_template_and_bad_template_rejected(tokenizer):
    template = resolve_template("T0")
    texts = template.fill([SENTENCES[2]], tokenizer.mask_token)
    batch = tokenizer(texts, truncation=True, max_length=6, return_tensors="pt")
    with pytest.raises(DataError, match="truncated"):
        mask_token_weights(batch["input_ids"], tokenizer, template.mask_count)
    with pytest.raises(DataError, match="template"):
        resolve_template("T9")
    assert resolve_template("none") is None


# --------------------------------------------------------------------------------------------- extraction
@pytest.fixture(scope="module")
def tiny_source(tokenizer):
    torch.manual_seed(0)
    return TransformerSource("tiny", AutoModel.from_config(tiny_bert_config()), tokenizer)


def make_extractor():
    return Extractor(SENTENCES[::-1], HiddenStateCache(), batch_size=4)


def text_positions_mask(batch):
    """1 on t1..tN (paper eq. 1): every real position but the first ([CLS]) and the last real one ([SEP])."""
    mask = batch["attention_mask"].clone().float()
    mask[:, 0] = 0
    mask[torch.arange(len(mask)), batch["attention_mask"].sum(1) - 1] = 0
    return mask


def test_avg_matches_model_pooling_and_cache_reuses_states(tiny_source, tokenizer):
    extractor = make_extractor()
    settings = [ExtractionSetting("first_last", "none", agg, parse_postprocessing(pp))
                for agg in ("avg", "idf-t", "idf-w", "no-biases") for pp in ("none", "zscore", "whiten")]
    vectors = {(s.aggregation, str(s.postprocessing)): extractor.embed(tiny_source, SENTENCES, s) for s in settings}
    assert extractor.cache.encodings == 1  # one encoding pass for 12 cells
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        outputs = tiny_source.model(**batch, output_hidden_states=True)
    states = (outputs.hidden_states[1] + outputs.hidden_states[2]) / 2
    # eq. 3: the mean over the text's N tokens, [CLS] and [SEP] not among them
    text = text_positions_mask(batch)
    expected = (states * text[..., None]).sum(1) / text.sum(1, keepdim=True)
    np.testing.assert_allclose(vectors[("avg", "none")], expected.numpy(), atol=1e-5)
    # the explicit option is SimCSE's avg_first_last pooler (attention-mask mean, [CLS]/[SEP] included)
    with_special = Extractor(SENTENCES[::-1], HiddenStateCache(), batch_size=4, average_special_tokens=True)
    pooler = pool("avg_first_last", [1, 2], outputs.hidden_states, batch["attention_mask"])
    np.testing.assert_allclose(with_special.embed(tiny_source, SENTENCES, settings[0]), pooler.numpy(), atol=1e-5)
    # idf-t: same states, weights log(N/df) over the texts, normalised over the text's tokens
    ids = [set(row) for row in tokenizer(SENTENCES)["input_ids"]]
    idf = {t: np.log(len(ids) / sum(t in row for row in ids)) for row in ids for t in row}
    weights = torch.tensor([[idf.get(int(t), 0.0) for t in row] for row in batch["input_ids"]]) * text
    weights = weights / weights.sum(1, keepdim=True)
    np.testing.assert_allclose(vectors[("idf-t", "none")], (states * weights[..., None]).sum(1).numpy(), atol=1e-5)


def test_mask_aggregation_reads_mask_states(tiny_source, tokenizer):
    extractor = make_extractor()
    vectors = extractor.embed(tiny_source, SENTENCES[:2], ExtractionSetting("last", "T0", "mask"))
    text = resolve_template("T0").fill(SENTENCES[:1], tokenizer.mask_token)
    batch = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        last = tiny_source.model(**batch).last_hidden_state[0]
    position = int((batch["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0, 0])
    np.testing.assert_allclose(vectors[0], last[position].numpy(), atol=1e-5)
    with pytest.raises(DataError, match="template"):
        ExtractionSetting("last", "none", "mask").validate()


def test_random_embeddings_seeded_and_averaged(tokenizer):
    source = RandomEmbeddingSource(tokenizer, seed=7)
    assert source.table.shape == (len(tokenizer), 768)
    assert abs(float(source.table.std()) - 0.1) < 1e-3
    torch.testing.assert_close(source.table, RandomEmbeddingSource(tokenizer, seed=7).table)
    vectors = make_extractor().embed(source, SENTENCES[:1], ExtractionSetting("-", "none", "avg"))
    ids = tokenizer(SENTENCES[:1], add_special_tokens=False)["input_ids"][0]  # t1..tN, no [CLS]/[SEP]
    np.testing.assert_allclose(vectors[0], source.table[ids].mean(0).numpy(), atol=1e-6)


def test_averaged_static_and_mixing(tiny_source, tokenizer):
    static = AveragedStaticSource(tiny_source, SENTENCES, batch_size=4)
    table = static.table([2])
    guitar = tokenizer.convert_tokens_to_ids("guitar")
    batch = tokenizer(SENTENCES[:1], return_tensors="pt")
    with torch.no_grad():
        states = tiny_source.model(**batch).last_hidden_state[0]
    position = batch["input_ids"][0].tolist().index(guitar)  # "guitar" occurs once in the corpus
    torch.testing.assert_close(table[guitar], states[position], atol=1e-5, rtol=1e-5)
    extractor = make_extractor()
    setting = ExtractionSetting("last", "none", "avg")
    base = extractor.embed(tiny_source, SENTENCES, setting)
    averaged = extractor.embed(static, SENTENCES, setting)
    for weight, expected in ((0.0, base), (1.0, averaged), (-0.5, 1.5 * base - 0.5 * averaged)):
        mixed = extractor.embed(MixedSource(tiny_source, static, weight), SENTENCES, setting)
        np.testing.assert_allclose(mixed, expected, atol=1e-5)



def test_repeated_texts_are_encoded_once_but_count_in_the_fit(tiny_source):
    extractor = make_extractor()
    texts = SENTENCES + SENTENCES[:2] * 5  # two texts used six times each, as STS sentences in several pairs
    setting = ExtractionSetting("last", "none", "avg", parse_postprocessing("zscore"))
    vectors = extractor.embed(tiny_source, texts, setting)
    [encoded] = extractor.cache.entries.values()
    assert encoded.count == len(SENTENCES)
    np.testing.assert_array_equal(vectors[len(SENTENCES)], vectors[0])
    np.testing.assert_allclose(vectors.mean(0), 0, atol=1e-5)  # fitted on every occurrence ...
    np.testing.assert_allclose(vectors.std(0), 1, rtol=1e-4)
    assert np.abs(vectors[: len(SENTENCES)].mean(0)).max() > 0.1  # ... not on the distinct texts


def test_avg_and_mixed_specs_of_one_grid_share_one_averaged_model(saved_tiny_model, data_dir):
    from csekit.extraction.extractor import load_source

    shared = {}
    static = load_source(f"avg:{saved_tiny_model}", data_dir, SENTENCES, averaged_sources=shared)
    mixed = load_source(f"{saved_tiny_model}+avg:0.5", data_dir, SENTENCES, averaged_sources=shared)
    assert mixed.parts[1][0] is static  # the corpus is averaged once for both specs
    alone = load_source(f"{saved_tiny_model}+avg:0.5", data_dir, SENTENCES)
    assert alone.parts[1][0] is not static


def idf_of(tokenizer, documents, unseen=None) -> dict:
    """idf = log(N / df) over token-id sets of ``documents`` (paper eq. 4), written here from the equation."""
    sets = [set(ids) for ids in tokenizer(list(documents))["input_ids"]]
    vocabulary = set().union(*sets)
    table = {token: float(np.log(len(sets) / sum(token in row for row in sets))) for token in vocabulary}
    return table if unseen is None else dict(table, default=unseen)


def pooled_with(states, batch, weight_of) -> np.ndarray:
    """Weighted mean over t1..tN with per-token weights ``weight_of(token_id)`` scaled to sum to 1 per text."""
    text = text_positions_mask(batch)
    weights = torch.tensor([[weight_of(int(token)) if real else 0.0 for token, real in zip(row, mask)]
                            for row, mask in zip(batch["input_ids"], text)])
    weights = weights / weights.sum(1, keepdim=True)
    return (states * weights[..., None]).sum(1).numpy()


def test_fit_set_fits_postprocessing_and_idf_t(tiny_source, tokenizer):
    extractor = make_extractor()
    texts, fit = SENTENCES[:3], SENTENCES * 2 + ["completely different words appear here ."]
    average = ExtractionSetting("last", "none", "avg")
    plain, fit_vectors = (extractor.embed(tiny_source, t, average) for t in (texts, fit))
    zscore = ExtractionSetting("last", "none", "avg", parse_postprocessing("zscore"))
    np.testing.assert_allclose(extractor.embed(tiny_source, texts, zscore, fit_texts=fit),
                               (plain - fit_vectors.mean(0)) / fit_vectors.std(0), atol=1e-4)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = tiny_source.model(**batch).last_hidden_state
    idf = idf_of(tokenizer, fit)
    expected = pooled_with(states, batch, lambda token: idf[token])
    vectors = extractor.embed(tiny_source, texts, ExtractionSetting("last", "none", "idf-t"), fit_texts=fit)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)


def test_sts_fit_set_all_splits_is_train_dev_test_of_sts_b_and_sick_r(data_dir):
    from csekit.evaluation.sts import load_sts_task
    from csekit.extraction.grid import evaluation_units

    def fit_sets(fit_set):
        seen = {}

        def scorer(name):
            def embed(texts, fit_texts=None):
                seen[name] = fit_texts
                return np.random.default_rng(0).normal(size=(len(texts), 4))
            return embed

        tasks = ["STS13", "STSBenchmark", "SICKRelatedness"]
        for _, name, score in evaluation_units(["sts"], data_dir, sts_tasks=tasks, sts_fit_set=fit_set):
            score(scorer(name))
        return seen

    assert fit_sets("test") == {"STS13": None, "STSBenchmark": None, "SICKRelatedness": None}
    seen = fit_sets("all-splits")
    assert seen["STS13"] is None  # STS12-16 have a test split only
    for task, sizes in (("STSBenchmark", (80, 40, 40)), ("SICKRelatedness", (60, 30, 40))):  # the synthetic sizes
        splits = [load_sts_task(data_dir, task, split) for split in ("train", "dev", "test")]
        assert [len(pairs.scores) for pairs in splits] == list(sizes)
        assert seen[task] == [s for pairs in splits for s in pairs.sentences1 + pairs.sentences2]  # duplicates kept
    with pytest.raises(DataError, match="fit set"):
        evaluation_units(["sts"], data_dir, sts_tasks=["STS13"], sts_fit_set="train")


def test_extract_cli_all_splits_fits_zscore_on_train_dev_test(data_dir, tmp_path, bert_base_uncased):
    """End to end: ``csekit extract --sts-fit-set all-splits`` scores STS-B test with z-score fitted on the sentences
    of every train, dev and test pair, computed here from the definitions (RE vectors: seeded N(0, 0.1^2) rows, mean
    over t1..tN; z-score; cosine; Spearman), not from csekit's helpers."""
    from scipy.stats import spearmanr
    from transformers import AutoTokenizer

    from csekit.evaluation.sts import load_sts_task
    from csekit.extraction.extractor import bert_tokenizer_path

    def run(fit_set):
        output = tmp_path / f"{fit_set}.json"
        assert main(["extract", "--models", "re", "--sts-tasks", "STSBenchmark", "--postprocessing", "zscore",
                     "--sts-fit-set", fit_set, "--data-dir", str(data_dir), "--output", str(output)]) == 0
        return json.loads(output.read_text())["rows"][0]["sts"]["STSBenchmark"]

    tok = AutoTokenizer.from_pretrained(bert_tokenizer_path())
    assert bert_tokenizer_path().parent.parent.name == "models--bert-base-uncased"  # through the Hub cache
    table = np.random.default_rng(42).normal(0.0, 0.1, (len(tok), 768)).astype(np.float32)

    def vectors(sentences):
        return np.stack([table[ids].mean(0) for ids in tok(sentences, add_special_tokens=False)["input_ids"]])

    splits = {split: load_sts_task(data_dir, "STSBenchmark", split) for split in ("train", "dev", "test")}
    test = splits["test"]

    def expected(fit_pairs):
        fit = vectors([s for pairs in fit_pairs for s in pairs.sentences1 + pairs.sentences2]).astype(np.float64)
        mean, std = fit.mean(0), fit.std(0)
        a, b = ((vectors(side) - mean) / std for side in (test.sentences1, test.sentences2))
        cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        return 100 * spearmanr(cosine, test.scores).statistic

    everything, test_only = expected(splits.values()), expected([test])
    assert abs(everything - test_only) > 0.5  # the two fit sets are distinguishable on this task
    assert run("all-splits") == pytest.approx(everything, abs=0.01)
    assert run("test") == pytest.approx(test_only, abs=0.01)


# The paper's RE column (Tables A2-A7, seed 42; STS12 is printed without decimals in our copy): avg and avg + whiten
# are the rows, zscore also pins the STS-B / SICK-R fit set (train+dev+test gives 53.2 on STS-B, paper 54.6).
PAPER_RE = {
    "none": {"STS13": 48.8, "STS14": 48.2, "STS15": 62.1, "STS16": 55.5, "STSBenchmark": 46.5, "SICKRelatedness": 53.1},
    "whiten": {"STS13": 75.1, "STS14": 68.3, "STS15": 67.9, "STS16": 67.1, "STSBenchmark": 68.1,
               "SICKRelatedness": 53.3},
    "zscore": {"STS13": 55.9, "STS14": 53.5, "STS15": 64.3, "STS16": 60.4, "STSBenchmark": 54.6,
               "SICKRelatedness": 56.3},
}


def test_random_embeddings_reproduce_the_papers_re_column(real_data_dir, real_bert_tokenizer):
    from csekit.extraction.extractor import load_source
    from csekit.extraction.grid import evaluation_units

    source = load_source("re", real_data_dir, seed=42)
    extractor = Extractor([], HiddenStateCache())
    units = evaluation_units(["sts"], real_data_dir, sts_tasks=list(PAPER_RE["none"]))
    off = {}
    for _, task, score in units:
        for chain, row in PAPER_RE.items():
            ours = score(extractor.embedder(source, ExtractionSetting("-", "none", "avg", parse_postprocessing(chain))))
            if abs(ours - row[task]) > 0.15:
                off[(task, chain)] = (ours, row[task])
        extractor.cache.release()
    assert not off, f"(ours, paper) beyond 0.15: {off}"


def test_template_tokens_and_mask_are_weighted_like_any_token(tiny_source, tokenizer):
    """One rule (idf.py): a template's words and [MASK] are tokens of the templated text, weighted like any token by
    tables counted on raw sentences."""
    reference = SENTENCES[::-1]
    extractor = Extractor(reference, HiddenStateCache(), batch_size=4)
    texts = SENTENCES[:4]
    template = resolve_template("T0")
    filled = template.fill(texts, tokenizer.mask_token)
    batch = tokenizer(filled, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = tiny_source.model(**batch).last_hidden_state
    mask_id = tokenizer.mask_token_id
    # both tables counted on raw sentences; a token absent from the corpus ([MASK], "means", ...) gets log N
    idf_t = idf_of(tokenizer, texts, unseen=float(np.log(len(texts))))
    idf_w = idf_of(tokenizer, reference, unseen=float(np.log(len(reference))))
    assert mask_id not in idf_t and mask_id not in idf_w and tokenizer.convert_tokens_to_ids("means") not in idf_t
    keep = bias_token_table(tokenizer, tokenize_ids(tokenizer, reference))
    assert keep[mask_id] == 1  # [MASK] is neither frequent, punctuation nor a subword
    expected = {
        "avg": pooled_with(states, batch, lambda token: 1.0),
        "idf-t": pooled_with(states, batch, lambda token: idf_t.get(token, idf_t["default"])),
        "idf-w": pooled_with(states, batch, lambda token: idf_w.get(token, idf_w["default"])),
        "no-biases": pooled_with(states, batch, lambda token: float(keep[token])),
    }
    for aggregation, vectors in expected.items():
        ours = extractor.embed(tiny_source, texts, ExtractionSetting("last", "T0", aggregation))
        np.testing.assert_allclose(ours, vectors, atol=1e-5, err_msg=aggregation)


# --------------------------------------------------------------------------------------------- on-disk cache
class CodeOnUnpickle:
    """Unpickling this (``torch.load(weights_only=False)``, ``pickle.load``) creates the file ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def cached_embed(model_spec, data_dir, cache_dir, texts=SENTENCES, avg_corpus=None):
    from csekit.extraction.extractor import load_source

    cache = HiddenStateCache(cache_dir)
    extractor = Extractor(SENTENCES[::-1], cache, batch_size=4)
    source = load_source(model_spec, data_dir, avg_corpus)
    return extractor.embed(source, texts, ExtractionSetting("last", "none", "avg")), cache


def copy_model(saved_tiny_model, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(saved_tiny_model, folder)
    return folder


def test_disk_cache_rebuilds_after_the_weights_are_overwritten(saved_tiny_model, data_dir, tmp_path):
    from csekit.modeling import SimCSEModel

    folder = copy_model(saved_tiny_model, tmp_path)
    before, cache = cached_embed(str(folder), data_dir, tmp_path / "cache")
    assert cache.encodings == 1
    again, cache = cached_embed(str(folder), data_dir, tmp_path / "cache")
    assert cache.encodings == 0 and np.array_equal(again, before)  # a hit from disk
    model = SimCSEModel.from_pretrained(folder)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.save_pretrained(folder)  # same folder, same name, new weights
    fresh, _ = cached_embed(str(folder), data_dir, None)
    after, cache = cached_embed(str(folder), data_dir, tmp_path / "cache")
    assert cache.encodings == 1 and not np.allclose(after, before, atol=1e-3)
    np.testing.assert_array_equal(after, fresh)


def test_disk_cache_keys_the_averaging_corpus(saved_tiny_model, data_dir, tmp_path):
    spec = f"avg:{saved_tiny_model}"
    first, _ = cached_embed(spec, data_dir, tmp_path, avg_corpus=SENTENCES)
    other_corpus = SENTENCES[:3] + ["the guitar player is a man ."]
    second, cache = cached_embed(spec, data_dir, tmp_path, avg_corpus=other_corpus)
    fresh, _ = cached_embed(spec, data_dir, None, avg_corpus=other_corpus)
    assert cache.encodings == 1 and not np.allclose(first, second)
    np.testing.assert_array_equal(second, fresh)


@pytest.mark.parametrize("damage", ["truncate", "flip a byte", "crafted pickle"])
def test_disk_cache_rebuilds_a_damaged_entry_and_never_unpickles(tiny_source, damage, tmp_path):
    setting = ExtractionSetting("last", "none", "avg")
    first = Extractor(SENTENCES[::-1], HiddenStateCache(tmp_path / "cache"), batch_size=4)
    before = first.embed(tiny_source, SENTENCES, setting)
    [entry] = (tmp_path / "cache").iterdir()
    marker = tmp_path / "code-ran"
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "flip a byte":
        entry.write_bytes(data[:-7] + bytes([data[-7] ^ 0xFF]) + data[-6:])  # inside the last tensor's values
    else:  # a pickle where the entry was, and one next to it under the old .pt name
        torch.save(CodeOnUnpickle(marker), entry)
        torch.save(CodeOnUnpickle(marker), entry.with_suffix(".pt"))
    cache = HiddenStateCache(tmp_path / "cache")
    try:
        after = Extractor(SENTENCES[::-1], cache, batch_size=4).embed(tiny_source, SENTENCES, setting)
    finally:
        assert not marker.exists(), "the cache unpickled a file"
    assert cache.encodings == 1 and len(cache.rebuilt) == 1, cache.rebuilt
    np.testing.assert_array_equal(after, before)
    reread = HiddenStateCache(tmp_path / "cache")  # the rebuilt entry is valid again
    Extractor(SENTENCES[::-1], reread, batch_size=4).embed(tiny_source, SENTENCES, setting)
    assert reread.encodings == 0 and not reread.rebuilt


def test_model_loader_never_unpickles(saved_tiny_model, data_dir, tmp_path):
    from csekit.extraction.extractor import load_source

    folder = copy_model(saved_tiny_model, tmp_path)
    for weights in folder.rglob("*.safetensors"):  # the sentence-transformers module folders' too
        weights.unlink()
    marker = tmp_path / "code-ran"
    torch.save(CodeOnUnpickle(marker), folder / "pytorch_model.bin")
    with pytest.raises(Exception):
        load_source(str(folder), data_dir)
    assert not marker.exists()


def test_no_unpickling_call_in_the_package():
    """Secondary to the crafted-file tests above: no pickle-reading call anywhere in csekit's code (csekit/,
    modeling/, trainers/, recipes/) or in benchmarks/."""
    import importlib.util
    import re

    pattern = re.compile(r"torch\.load\(|pickle\.loads?\(|joblib\.load|dill\.load|allow_pickle\s*=\s*True|"
                         r"weights_only\s*=\s*False|Unpickler\(")
    files = list((REPO_ROOT / "benchmarks").rglob("*.py"))
    for package in ("csekit", "csekit.modeling", "csekit.trainers", "csekit.recipes"):
        for folder in importlib.util.find_spec(package).submodule_search_locations:
            files += Path(folder).glob("*.py" if package != "csekit" else "**/*.py")
    assert any(path.parent.name == "benchmarks" for path in files) and len(files) > 40
    hits = [f"{path}:{n}" for path in files for n, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)]
    assert not hits, hits


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(DataError, match="bad device"):
        resolve_device("gpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_extraction_and_evaluation_match_cpu(saved_tiny_model, data_dir):
    from csekit.evaluation.encoders import load_embedder
    from csekit.extraction.extractor import load_source

    setting = ExtractionSetting("first_last", "none", "idf-w")
    extracted = {device: make_extractor().embed(load_source(str(saved_tiny_model), data_dir, device=device),
                                                SENTENCES, setting) for device in ("cpu", "cuda")}
    np.testing.assert_allclose(extracted["cuda"], extracted["cpu"], atol=1e-4)
    evaluated = {device: load_embedder(str(saved_tiny_model), device=device)[0](SENTENCES)
                 for device in ("cpu", "cuda")}
    np.testing.assert_allclose(evaluated["cuda"], evaluated["cpu"], atol=1e-4)


def test_layer_specs():
    assert resolve_layers("1_2_last", 12) == [1, 2, 12]
    assert resolve_layers("-1+0+last", 6) == [-1, 0, 6]
    for bad in ("13", "first", "1+x"):
        with pytest.raises(DataError):
            resolve_layers(bad, 12)


def test_reference_corpus_splits_wikitext(tmp_path):
    path = tmp_path / "wiki.test.raw"
    path.write_text(" = Title = \n\n The cat sat on the mat . It was happy . Ok .\n")
    assert read_reference_corpus(path) == ["The cat sat on the mat .", "It was happy ."]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--aggregations", "sum"], "unknown aggregation"),
        (["--postprocessing", "whitening"], "post-processing step"),
        (["--templates", "no slot here"], "unknown template"),
        (["--tasks", "sts,glue"], "unknown task suite"),
        (["--sts-tasks", "STS99"], "unknown STS task"),
        (["--device", "gpu"], "bad device"),
    ],
)
def test_extract_cli_rejects_bad_flags(flags, message, capsys):
    assert main(["extract", "--models", "re", *flags]) == 2
    assert message in capsys.readouterr().err


def test_evaluate_cli_rejects_bad_suite(capsys):
    assert main(["evaluate", "all-MiniLM-L6-v2", "--tasks", "sts,glue"]) == 2
    assert "unknown task suite" in capsys.readouterr().err
