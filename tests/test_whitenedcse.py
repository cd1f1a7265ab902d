"""WhitenedCSE: shuffled group whitening, the multi-positive losses, the model and its round trips."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoModel, BertConfig, RobertaConfig

from conftest import REPO_ROOT, loss_settings, run_isolated_python, tiny_bert_config
from csekit.errors import DataError
from csekit.modeling import WhitenedCSEConfig, WhitenedCSEModel
from csekit.modeling.losses import (
    info_nce_loss,
    multi_positive_info_nce_terms,
    multi_positive_l1_loss,
    multi_positive_l2_loss,
)
from csekit.modeling.whitening import GroupWhitening, whitening_matrices
from csekit.trainers import WhitenedCSETrainer


def correlated(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator) @ torch.randn(shape[-1], shape[-1], generator=generator)


def batch_covariance(x):
    centred = x - x.mean(dim=-2, keepdim=True)
    return centred.transpose(-1, -2) @ centred / x.shape[-2]


def tiny_model(**overrides):
    values = dict(encoder_config=tiny_bert_config().to_dict(), pooler_type="cls", num_groups=2)
    values.update(overrides)
    return WhitenedCSEModel(WhitenedCSEConfig(**values))


# ------------------------------------------------------------------------------------------------------ whitening
@pytest.mark.parametrize(
    "kind,differentiable",
    [("pca", False), ("zca", False), ("zca", True), ("group", True), ("shuffled_group", False),
     ("shuffled_group", True)],
)
def test_rank_deficient_batch_under_bf16_autocast_is_finite_in_float32(kind, differentiable):
    whitening = GroupWhitening(64, 2, kind=kind, differentiable=differentiable).train()
    features = correlated(3, 8, 64).bfloat16().requires_grad_()  # 8 samples < 32 channels: rank-deficient
    with torch.autocast("cpu", dtype=torch.bfloat16):
        whitened = whitening(features)
    assert whitened.dtype == torch.float32
    assert torch.isfinite(whitened).all()
    (whitened * torch.randn_like(whitened)).sum().backward()
    assert torch.isfinite(features.grad).all() and features.grad.abs().sum() > 0


def test_gradient_through_whitening_matrix_matches_finite_differences():
    covariance = batch_covariance(correlated(2, 40, 6).double())
    covariance.requires_grad_()
    # eigh reads one triangle only, so check the gradient of the symmetric parametrisation (c + cᵀ) / 2
    def whiten(c):
        return whitening_matrices(0.5 * (c + c.transpose(-1, -2)), "zca", 1e-3, differentiable=True)

    torch.autograd.gradcheck(whiten, (covariance,))


def test_whitening_gradient_flag_changes_the_gradient_only_when_set():
    features = correlated(1, 32, 16).requires_grad_()
    target = torch.randn(1, 32, 16)
    grads = []
    for differentiable in (False, True):
        whitening = GroupWhitening(16, kind="zca", differentiable=differentiable).train()
        (whitening(features) * target).sum().backward()
        grads.append(features.grad.clone())
        features.grad = None
    assert not torch.allclose(grads[0], grads[1], atol=1e-4)


@pytest.mark.parametrize("kind,num_groups", [("zca", 1), ("pca", 1), ("group", 3), ("shuffled_group", 3)])
def test_full_rank_batch_is_whitened_to_identity_group_covariance(kind, num_groups):
    whitening = GroupWhitening(24, num_groups, kind=kind, eps=1e-8).train()
    permutation = torch.randperm(24)
    whitened = whitening(correlated(1, 500, 24), permutations=permutation[None])[0].double()
    # the groups are blocks of the permuted channels; inside each the covariance is the identity
    blocks = batch_covariance(whitened[:, permutation] if kind == "shuffled_group" else whitened)
    for start in range(0, 24, whitening.group_size):
        block = blocks[start : start + whitening.group_size, start : start + whitening.group_size]
        torch.testing.assert_close(block, torch.eye(whitening.group_size, dtype=block.dtype), atol=1e-3, rtol=0)


def test_zca_keeps_the_original_axes():
    # ZCA is the whitening closest to the input (W symmetric positive definite): on already-white data it is ~I
    features = torch.randn(20000, 8)
    whitened = GroupWhitening(8, kind="zca").train()(features)
    torch.testing.assert_close(whitened, features - features.mean(0), atol=0.1, rtol=0.05)


def test_shuffle_and_unshuffle_match_a_numpy_reference():
    rng = np.random.default_rng(0)
    features = (rng.standard_normal((64, 12)) @ rng.standard_normal((12, 12))).astype(np.float64)
    permutation = rng.permutation(12)
    size, eps = 4, 1e-5
    # reference: permute channels, ZCA each group of 4 with its batch covariance (/N), write back in place
    centred = features - features.mean(0)
    shuffled = centred[:, permutation]
    expected = np.empty_like(centred)
    for start in range(0, 12, size):
        block = shuffled[:, start : start + size]
        eigenvalues, eigenvectors = np.linalg.eigh(block.T @ block / len(block))
        zca = eigenvectors @ np.diag((eigenvalues + eps) ** -0.5) @ eigenvectors.T
        expected[:, permutation[start : start + size]] = block @ zca
    whitening = GroupWhitening(12, 12 // size, kind="shuffled_group", eps=eps).train()
    actual = whitening(torch.tensor(features, dtype=torch.float32), permutations=torch.tensor(permutation)[None])
    np.testing.assert_allclose(actual.numpy(), expected, atol=1e-4)


def test_each_draw_gets_its_own_permutation():
    features = correlated(1, 64, 32).expand(3, -1, -1)
    draws = GroupWhitening(32, 4, kind="shuffled_group").train()(features)
    assert not torch.allclose(draws[0], draws[1], atol=1e-3)
    unshuffled = GroupWhitening(32, 4, kind="group").train()(features)
    torch.testing.assert_close(unshuffled[0], unshuffled[2])


def test_running_statistics_follow_eq_13_and_are_used_in_eval():
    whitening = GroupWhitening(8, 2, kind="group", momentum=0.75).train()
    first, second = correlated(1, 32, 8, seed=1), correlated(1, 32, 8, seed=2)
    whitening(first)
    whitening(second)
    expected_mean = 0.75 * 0.25 * first[0].mean(0) + 0.25 * second[0].mean(0)
    expected_cov = 0.75 * (0.75 * torch.eye(8) + 0.25 * batch_covariance(first[0])) + 0.25 * batch_covariance(second[0])
    torch.testing.assert_close(whitening.running_mean, expected_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(whitening.running_covariance, expected_cov, atol=1e-5, rtol=1e-5)
    whitening.eval()
    one = correlated(5, 8, seed=3)
    torch.testing.assert_close(whitening(one)[:1], whitening(one[:1]), atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------------------------------------- losses
def test_multi_positive_terms_and_losses_match_the_direct_formulas():
    anchors, positives, tau = torch.randn(5, 8), torch.randn(5, 3, 8), 0.1
    terms = multi_positive_info_nce_terms(anchors, positives, temperature=tau)
    expected = torch.empty(5, 3)
    for i in range(5):
        for p in range(3):
            sims = torch.stack([F.cosine_similarity(anchors[i], positives[j, p], dim=0) for j in range(5)]) / tau
            expected[i, p] = -(sims[i] - torch.logsumexp(sims, dim=0))
    torch.testing.assert_close(terms, expected, atol=1e-5, rtol=1e-5)
    weights = [1.0, 0.8, 0.5]  # one lambda per positive
    l1 = torch.stack([sum(weights[p] * expected[i, p] for p in range(3)) for i in range(5)]).mean()
    torch.testing.assert_close(multi_positive_l1_loss(terms, weights), l1)
    # eq. 8 with the negative sign: log sum_p lambda_p e^{-s_ip/tau} sum_j e^{s_ij,p/tau}
    l2 = torch.stack([
        torch.log(sum(weights[p] * torch.exp(-F.cosine_similarity(anchors[i], positives[i, p], dim=0) / tau)
                      * torch.exp(torch.stack([F.cosine_similarity(anchors[i], positives[j, p], dim=0)
                                               for j in range(5)]) / tau).sum() for p in range(3)))
        for i in range(5)
    ]).mean()
    torch.testing.assert_close(multi_positive_l2_loss(terms, weights), l2, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="one weight per positive"):
        multi_positive_l1_loss(terms, [1.0, 0.8])


def test_one_positive_reduces_to_simcse_info_nce():
    anchors, positives = torch.randn(6, 8), torch.randn(6, 8)
    simcse = info_nce_loss(anchors, positives, temperature=0.05)
    terms = multi_positive_info_nce_terms(anchors, positives[:, None], temperature=0.05)
    torch.testing.assert_close(multi_positive_l1_loss(terms), simcse)
    torch.testing.assert_close(multi_positive_l2_loss(terms), simcse)


def test_l2_pulls_the_least_similar_positive_hardest():
    anchors = torch.randn(4, 8)
    positives = torch.stack([anchors + 0.01 * torch.randn(4, 8), torch.randn(4, 8)], dim=1).requires_grad_()
    terms = multi_positive_info_nce_terms(anchors, positives, temperature=0.05)
    multi_positive_l2_loss(terms).backward()
    towards_anchor = -(positives.grad * F.normalize(anchors, dim=-1)[:, None]).sum(-1)  # descent direction . anchor
    assert (towards_anchor[:, 1] > towards_anchor[:, 0]).all() and (towards_anchor[:, 1] > 0).all()


# ------------------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize(
    "overrides,message",
    [
        (dict(num_groups=12), "num_groups 12 must divide the hidden size 32"),
        (dict(num_groups=0), "num_groups must be >= 1"),
        (dict(positive_weights=[1.0]), r"positive_weights must be 2 values > 0 \(one per positive\), got \[1.0\]"),
        (dict(positive_weights=[1.0, 0.0]), "positive_weights must be 2 values > 0"),
        (dict(num_positives=0), "num_positives must be >= 1"),
        (dict(whitening="batch"), "whitening must be one of"),
        (dict(loss_type="L3"), "loss_type must be one of"),
        (dict(positive_source="mixup"), "positive_source must be one of"),
        (dict(inference_representation="mlp"), "inference_representation must be one of"),
        (dict(whitening="pca", whitening_gradient=True), "not available for pca"),
        (dict(whitening_momentum=1.0), "whitening_momentum"),
    ],
)
def test_config_rejects_bad_values(overrides, message):
    with pytest.raises(StrictDataclassClassValidationError, match=message):
        WhitenedCSEConfig(encoder_config=tiny_bert_config().to_dict(), **{"num_groups": 2, **overrides})


def test_recipe_reports_bad_config_as_one_line_error(minilm_path, capsys):
    from csekit.recipe_run import main_guard
    from csekit.recipes.whitenedcse import RECIPE

    def build(argv):
        RECIPE.build_model(str(minilm_path), RECIPE.parse(argv)[0])

    with pytest.raises(SystemExit) as exit_info:
        main_guard(build, ["--num_groups", "100"])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]  # after the weight-loading progress bar
    assert message.startswith("csekit: error: invalid model configuration: ")
    assert "num_groups 100 must divide the hidden size 384" in message


# ------------------------------------------------------------------------------------------------------------- model
@pytest.mark.parametrize("source,views", [("sgw", 2), ("dropout", 4)])
def test_training_forward_returns_anchor_and_positives(source, views):
    model = tiny_model(num_positives=3, positive_source=source).train()
    out = model(input_ids=torch.randint(1000, 2000, (8, views, 10)))
    assert out.embeddings.shape == (8, 4, 32) and out.pooled.shape == (8, views, 32)
    with pytest.raises(ValueError, match=f"input_ids \\(batch, {views}, seq_len\\)"):
        model(input_ids=torch.randint(1000, 2000, (8, views + 1, 10)))


@pytest.mark.parametrize("settings", loss_settings("whitenedcse"))
def test_trainer_loss_and_logged_components(settings):
    model = tiny_model(num_positives=2, loss_type="L2", **settings).train()
    trainer = WhitenedCSETrainer.__new__(WhitenedCSETrainer)  # compute_losses only needs the accelerator
    trainer.accelerator = type("Accel", (), {"num_processes": 1, "process_index": 0,
                                             "unwrap_model": staticmethod(lambda m: m)})()
    outputs = model(input_ids=torch.randint(1000, 2000, (6, 2, 10)))
    losses = trainer.compute_losses(model, outputs, {})
    assert set(losses) == {"loss", "contrastive", "positive_1", "positive_2"}
    terms = multi_positive_info_nce_terms(outputs.embeddings[:, 0], outputs.embeddings[:, 1:],
                                          temperature=model.config.temperature)
    torch.testing.assert_close(losses["loss"], multi_positive_l2_loss(terms))
    torch.testing.assert_close(losses["positive_2"], terms[:, 1].mean())


SENTENCES = [f"sentence number {i} " + "with some words " * (i % 7) for i in range(64)]


@pytest.mark.parametrize("representation", ["pooled", "head_no_whitening", "whitened", "head"])
def test_inference_embedding_does_not_depend_on_the_batch(tokenizer, representation):
    model = tiny_model(inference_representation=representation, pooler_type="avg")
    model.tokenizer = tokenizer
    model.train()
    # give the running statistics non-trivial values through one training step
    batch = tokenizer(SENTENCES[:32], padding=True, return_tensors="pt")
    model(input_ids=batch["input_ids"][:, None].expand(-1, 2, -1),
          attention_mask=batch["attention_mask"][:, None].expand(-1, 2, -1))
    together = model.encode(SENTENCES, batch_size=64, convert_to_numpy=False)
    for index in (0, 37, 63):
        alone = model.encode([SENTENCES[index]], convert_to_numpy=False)
        torch.testing.assert_close(alone[0], together[index], atol=1e-5, rtol=0)
    assert model.training  # encode restores the mode


def test_save_and_reload_reproduce_embeddings_exactly(tmp_path, tokenizer):
    model = tiny_model(inference_representation="head")
    model.tokenizer = tokenizer
    batch = tokenizer(SENTENCES[:16], padding=True, return_tensors="pt")
    model.train()(input_ids=batch["input_ids"][:, None].expand(-1, 2, -1),
                  attention_mask=batch["attention_mask"][:, None].expand(-1, 2, -1))
    expected = model.encode(SENTENCES[:8])
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(reloaded, WhitenedCSEModel)
    torch.testing.assert_close(reloaded.whitening.running_covariance, model.whitening.running_covariance)
    np.testing.assert_array_equal(reloaded.encode(SENTENCES[:8]), expected)

    np.save(tmp_path / "expected.npy", expected)
    code = (
        "import numpy as np\n"
        "from transformers import AutoModel\n"
        f"model = AutoModel.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)\n"
        "assert type(model).__module__.startswith('transformers_modules'), type(model).__module__\n"
        f"sentences = {SENTENCES[:8]!r}\n"
        f"np.testing.assert_array_equal(model.encode(sentences), np.load({str(tmp_path / 'expected.npy')!r}))\n"
        "print('ok')\n"
    )
    result = run_isolated_python(code, cwd=tmp_path)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


def test_gradients_reach_the_backbone_under_stop_gradient():
    model = tiny_model(num_groups=1).train()  # 6 sentences < 32 channels: rank-deficient in training
    outputs = model(input_ids=torch.randint(1000, 2000, (6, 2, 10)))
    terms = multi_positive_info_nce_terms(outputs.embeddings[:, 0], outputs.embeddings[:, 1:])
    multi_positive_l1_loss(terms).backward()
    grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert math.isfinite(terms.sum().item())


def test_groups_as_large_as_the_batch_whiten_it_to_a_simplex():
    batch = correlated(8, 32)
    for num_groups, degenerate in ((2, True), (8, False)):  # 16 channels > 8 sentences; 4 channels < 8
        whitening = GroupWhitening(32, num_groups, kind="group").train()
        whitened = whitening(batch)[:, : whitening.group_size]
        cosines = F.normalize(whitened, dim=-1) @ F.normalize(whitened, dim=-1).T
        off_diagonal = cosines[~torch.eye(8, dtype=torch.bool)]
        assert (off_diagonal.std() < 1e-4) == degenerate  # a regular simplex: every pair at cos = -1/(n-1)


def test_trainer_refuses_groups_as_wide_as_the_per_process_batch(tmp_path, caplog):
    from transformers import TrainingArguments

    def build(batch_size, **overrides):
        args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=batch_size, report_to="none",
                                 use_cpu=True)
        return WhitenedCSETrainer(model=tiny_model(**overrides), args=args)

    with pytest.raises(DataError, match="num_groups 2 gives whitening groups of 16 channels, not fewer than the 16 "
                                        "sentences per process"):
        build(16, num_groups=2)
    build(17, num_groups=2)  # 16 channels, 17 sentences: full rank
    build(8, whitening="none", num_groups=1)
    caplog.clear()
    build(16, whitening="zca")  # Table 3's whole-feature rows stay runnable, with a warning
    assert "rank-deficient" in caplog.text


def test_recipe_cli_exits_2_with_one_line_before_training(tmp_path, data_dir, capsys):
    """The recipe's main in the error boundary ``python recipes/whitenedcse.py`` runs it in (``main_guard``; the
    script door itself: test_data.py, test_package.py)."""
    from csekit.recipe_run import main_guard
    from csekit.recipes.whitenedcse import RECIPE

    output_dir = tmp_path / "run"
    argv = ["--config", str(REPO_ROOT / "recipes" / "configs" / "minilm_compare.yaml"), "--num_groups", "2",
            "--use_cpu", "true", "--data_dir", str(data_dir), "--output_dir", str(output_dir)]
    with pytest.raises(SystemExit) as stop:
        main_guard(RECIPE.main, argv)
    assert stop.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]  # after the weight-loading report
    assert message.startswith("csekit: error: WhitenedCSE: num_groups 2 gives whitening groups of 192 channels, not "
                              "fewer than the 64 sentences per process"), message
    assert not output_dir.exists() or not any(output_dir.iterdir())


# ------------------------------------------------------------------------------------ k, weights, inference options
@pytest.mark.parametrize(
    "encoder_config,num_groups",
    [
        (BertConfig(), 384),  # bert-base: the paper's k = 384 groups of 2 channels
        (RobertaConfig(), 256),  # §4.1: 256 for RoBERTa (3 channels)
        (RobertaConfig(hidden_size=1024, num_attention_heads=16), 256),  # roberta-large: 4 channels
        (BertConfig(hidden_size=1024, num_attention_heads=16), 512),  # bert-large: 384 does not divide 1024
        (BertConfig(hidden_size=384, num_attention_heads=12), 192),  # MiniLM: 384 groups would be 1 channel each
    ],
)
def test_num_groups_defaults_to_the_papers_k_and_config_json_records_it(encoder_config, num_groups, tmp_path):
    config = WhitenedCSEConfig(encoder_config=encoder_config.to_dict())
    assert config.num_groups == num_groups and config.positive_weights == [1.0, 1.0]
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["num_groups"] == num_groups and saved["positive_weights"] == [1.0, 1.0]
    assert WhitenedCSEConfig.from_pretrained(tmp_path).num_groups == num_groups


@pytest.mark.parametrize("kind", ["none", "pca", "zca"])
def test_whole_feature_whitening_does_not_need_num_groups_to_divide_the_hidden_size(kind):
    large = BertConfig(hidden_size=1024, num_attention_heads=16).to_dict()
    config = WhitenedCSEConfig(encoder_config=large, whitening=kind, num_groups=384)
    assert config.group_width == 1024
    assert GroupWhitening(1024, 384, kind=kind).group_size == 1024
    with pytest.raises(StrictDataclassClassValidationError, match="num_groups 384 must divide the hidden size 1024"):
        WhitenedCSEConfig(encoder_config=large, whitening="shuffled_group", num_groups=384)


def test_positive_weights_flag_parses_and_weights_each_positive():
    from csekit.recipes.whitenedcse import RECIPE

    model_args = RECIPE.parse(["--positive_weights", "1", "0.8"])[0]
    assert model_args.positive_weights == [1.0, 0.8]
    model = tiny_model(positive_weights=model_args.positive_weights).train()
    trainer = WhitenedCSETrainer.__new__(WhitenedCSETrainer)  # compute_losses only needs the accelerator
    trainer.accelerator = type("Accel", (), {"num_processes": 1, "process_index": 0,
                                             "unwrap_model": staticmethod(lambda m: m)})()
    outputs = model(input_ids=torch.randint(1000, 2000, (6, 2, 10)))
    losses = trainer.compute_losses(model, outputs, {})
    # the Jan-2023 authors' code: loss1 + 0.8 * loss2
    torch.testing.assert_close(losses["loss"], losses["positive_1"] + 0.8 * losses["positive_2"])


def test_head_no_whitening_is_linear_tanh_on_the_backbone_feature():
    model = tiny_model(inference_representation="head_no_whitening").eval()
    model.whitening.running_covariance.mul_(4.0)  # whitening, if applied, would change the result
    pooled = torch.randn(5, 32)
    torch.testing.assert_close(model.head(pooled), torch.tanh(pooled @ model.mlp.dense.weight.T + model.mlp.dense.bias))


def authors_shuffled_group_whitening(features: torch.Tensor, permutation: torch.Tensor, num_groups: int):
    """One block of SupstarZh/WhitenedCSE ``ShuffledGroupWhitening.forward`` (training), written from its formula:
    permute the channels, centre by the batch mean, per group of d/k channels the covariance / N, detached (their
    ``transformation`` copies it into a new leaf), ``W = U Λ^-1/2 Uᵀ`` (no eps), ``x W``, undo the permutation."""
    n, d = features.shape
    width = d // num_groups
    shuffled = features[:, permutation]
    centred = shuffled - shuffled.mean(dim=0, keepdim=True)
    groups = []
    for start in range(0, d, width):
        block = centred[:, start : start + width]
        eigenvalues, eigenvectors = torch.linalg.eigh((block.T @ block / n).detach())
        groups.append(block @ (eigenvectors @ torch.diag(eigenvalues.rsqrt()) @ eigenvectors.T))
    return torch.cat(groups, dim=1)[:, permutation.argsort()]  # out[:, π[j]] = whitened[:, j]


def test_sgw_output_and_input_gradient_match_the_authors_transform():
    generator = torch.Generator().manual_seed(13)
    features = (torch.randn(64, 768, generator=generator) @ torch.randn(768, 768, generator=generator) / 28 + 0.3)
    permutation = torch.randperm(768, generator=generator)
    upstream = torch.randn(64, 768, generator=generator, dtype=torch.float64)

    reference_input = features.double().requires_grad_()
    reference = authors_shuffled_group_whitening(reference_input, permutation, num_groups=384)
    (reference * upstream).sum().backward()

    csekit_input = features.clone().requires_grad_()
    sgw = GroupWhitening(768, 384, kind="shuffled_group", eps=0.0).train()
    whitened = sgw(csekit_input, permutations=permutation[None])
    (whitened * upstream.float()).sum().backward()

    torch.testing.assert_close(whitened.double(), reference.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(csekit_input.grad.double(), reference_input.grad, atol=1e-5, rtol=0)


NEAR_DUPLICATES = [
    ("A man is playing a guitar.", "A man is playing the guitar."),
    ("The company reported higher profits this year.", "The company reported higher profits last year."),
    ("She quickly opened the old wooden door.", "She slowly opened the old wooden door."),
    ("The river flows through the centre of the city.", "The river flows through the center of the city."),
]


def test_near_duplicates_stay_close_after_whitening_at_the_default_setting(minilm_path, data_dir):
    wiki = (data_dir / "wiki" / "wiki1m_for_simcse.txt").read_text().splitlines()[:64]
    sentences = wiki + [sentence for pair in NEAR_DUPLICATES for sentence in pair]
    model = WhitenedCSEModel.from_encoder(str(minilm_path), pooler_type="avg")  # the comparison budget's feature
    assert model.config.num_groups == 192  # the default rule on MiniLM's 384 channels: groups of 2
    pooled = model.encode(sentences, convert_to_numpy=False)  # eval mode: no dropout, the backbone feature

    def pair_cosines(whitening):  # 8 SGW draws of the 72-sentence batch with its own statistics
        draws = whitening.train()(pooled.expand(8, -1, -1))
        return F.cosine_similarity(draws[:, 64::2], draws[:, 65::2], dim=-1)

    assert pair_cosines(model.whitening).min() > 0.9
    # the old default, 384 channels per group (one group on MiniLM): the batch becomes a simplex, cos = -1/71
    assert pair_cosines(GroupWhitening(384, 1, kind="shuffled_group")).max() < 0.1
