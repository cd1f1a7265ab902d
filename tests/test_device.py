"""The paths that only run on an accelerator: gradient caching with the device's random state, fp16 (with its
gradient scaler) and bf16 cached steps, and packed attention on the device.

They run on CUDA when torch sees a GPU. ``CSEKIT_TEST_DEVICE=cpu`` runs the same tests on the CPU (what
``bash benchmarks/gpu_check.sh --cpu`` does in CI, so they cannot rot between lent GPUs); fp16 stays GPU-only (the
Trainer's fp16 needs CUDA). Every comparison is against a reference built here, as in ``test_gradient_cache.py``.
"""

import copy
import os

import pytest
import torch

from conftest import save_tiny_backbone
from csekit.methods import get_method
from csekit.modeling import packing
from test_gradient_cache import build, chunking, examples, inputs_of, largest_difference, step

DEVICE = os.environ.get("CSEKIT_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() else None)
pytestmark = pytest.mark.skipif(DEVICE is None, reason="needs a CUDA GPU (CSEKIT_TEST_DEVICE=cpu runs these on CPU)")
DEVICE_FLAGS = ("--use_cpu", "true") if DEVICE == "cpu" else ()


def on_device(batch: dict, device: torch.device) -> dict:
    return {name: value.to(device) for name, value in batch.items()}


@pytest.mark.parametrize("kind", ["examples", "tokens"])
@pytest.mark.parametrize("layout", ["padded", "packed", "packed, laid out"])
def test_a_cached_step_on_the_device_redraws_each_chunks_dropout_from_the_devices_random_state(
        kind, layout, backbones, sentences, tmp_path, monkeypatch):
    """Dropout on the device draws from the device's generator: the cached step must restore it before each chunk's
    second pass, so it equals the full-graph step with the same per-chunk random states. "packed, laid out": the
    packed row laid out from its padded layout (one attention block per layer, dropout drawn over that block), as an
    accelerator or a compiled step lays it out, here on any device; the reference's chunks carry that layout too."""
    laid_out = []
    if layout == "packed, laid out":
        def by_layout(lengths, padded_layout):
            laid_out.append(padded_layout is not None)
            return padded_layout is not None
        monkeypatch.setattr(packing, "laid_out_on_device", by_layout)
    method = get_method("simcse")
    flags = (*DEVICE_FLAGS, "--padding_free", str(layout != "padded").lower())
    plain = build(method, backbones[0.1], tmp_path / "plain", *flags)
    extra, bounds = chunking(kind, plain.data_collator(examples(method, sentences, ())))
    cached = build(method, backbones[0.1], tmp_path / "cached", *flags, *extra)
    device = cached.args.device
    assert device.type == DEVICE and cached.gradient_cache is not None
    batch = on_device(cached.data_collator(examples(method, sentences, ())), device)
    result = step(cached, batch, seed=11)

    model = copy.deepcopy(cached.model)
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(11)  # seeds every device's generator
    chunks = [inputs_of({k: v for k, v in batch.items() if k != "text_ids"}, start, end) for start, end in bounds]
    outputs = [model.chunk_forward(**chunk) for chunk in chunks]
    losses = cached.compute_losses(model, model.merge_chunks(outputs, chunks), batch)
    losses["loss"].backward()
    reference = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    torch.testing.assert_close(result[0], losses["loss"].detach(), rtol=1e-5, atol=1e-6)
    scale = max(float(g.abs().max()) for g in reference.values())
    assert largest_difference(result[1], reference) <= 1e-4 * scale
    assert all(laid_out) and bool(laid_out) == (layout == "packed, laid out")  # the layout reached every call


@pytest.mark.parametrize("precision", ["bf16", pytest.param("fp16", marks=pytest.mark.skipif(
    DEVICE != "cuda", reason="the Trainer's fp16 (autocast + gradient scaler) needs a CUDA GPU"))])
def test_a_half_precision_cached_step_is_the_uncached_half_precision_step(precision, backbones, sentences,
                                                                          tmp_path):
    """``--bf16``/``--fp16`` with ``--mini_batch_size``: the encoder runs in half precision, the losses in float32,
    and the gradients (unscaled by the fp16 scaler's scale) are no farther from the float32 step than the uncached
    half-precision step's are (x 4)."""
    method = get_method("simcse")
    half = (*DEVICE_FLAGS, f"--{precision}", "true")
    trainers = {"float32": build(method, backbones[0.0], tmp_path / "float32", *DEVICE_FLAGS),
                "uncached": build(method, backbones[0.0], tmp_path / "uncached", *half),
                "cached": build(method, backbones[0.0], tmp_path / "cached", *half, "--mini_batch_size", "3")}
    trainers["uncached"].accelerator.prepare_model(trainers["uncached"].model)  # its forward runs in autocast
    gradients = {}
    for name, trainer in trainers.items():
        batch = on_device(trainer.data_collator(examples(method, sentences, ())), trainer.args.device)
        loss, grads = step(trainer, batch)
        assert torch.isfinite(loss) and loss.dtype == torch.float32
        scaler = trainer.accelerator.scaler
        scale = float(scaler.get_scale()) if scaler is not None else 1.0
        assert (scaler is not None) == (precision == "fp16" and name != "float32")
        gradients[name] = {key: value.float() / scale for key, value in grads.items()}
    rounding = largest_difference(gradients["uncached"], gradients["float32"])
    assert 0 < largest_difference(gradients["cached"], gradients["float32"]) <= 4 * rounding


def test_packed_attention_on_the_device_is_the_padded_attention(tokenizer, tmp_path):
    """The packed path (``packing.py``'s blocked SDPA) on the device: switched on by the exactness probe and equal
    to the padded encoder in float32, and within bfloat16's rounding under autocast."""
    recipe = get_method("simcse").recipe_module.RECIPE
    backbone = save_tiny_backbone(tmp_path / "backbone", tokenizer, dropout=0.0)
    model = recipe.build_model(str(backbone), recipe.parse(["--pooler_type", "avg"])[0])
    device = torch.device(DEVICE)
    model = model.to(device).eval()
    texts = ["a short one", "a somewhat longer sentence with more words in it", "mid length words here",
             "x", "another sentence of a length between the others"]
    token_ids = [tokenizer(text)["input_ids"] for text in texts]
    assert model.use_packed_attention_if_exact(token_ids, tolerance=1e-5) is None
    longest = max(map(len, token_ids))
    padded = torch.zeros(len(token_ids), longest, dtype=torch.long, device=device)
    mask = torch.zeros_like(padded)
    for row, ids in enumerate(token_ids):
        padded[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
    row = torch.tensor([t for ids in token_ids for t in ids], device=device)[None]
    lengths = torch.tensor([[len(ids)] for ids in token_ids], device=device)
    with torch.no_grad():
        reference = model.pool_tokens(padded, mask)
        torch.testing.assert_close(model.pool_packed(row, lengths), reference, rtol=1e-5, atol=1e-5)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            half = model.pool_packed(row, lengths).float()
    assert (half - reference).abs().max() <= 0.05 * reference.abs().max()


def test_the_finite_check_skips_a_non_finite_update_on_the_device_and_reads_its_flag_an_update_later():
    """A fused AdamW on the device skips the update whose loss is NaN (the check's ``found_inf``), the update's flag
    reaches the host as a pinned copy queued behind the step (on CUDA), and reading it stops the run naming the
    step; the finite update before it was applied."""
    from csekit.errors import DataError
    from csekit.trainers.finite import FiniteCheck

    weight = torch.nn.Parameter(torch.ones(3, device=DEVICE))
    optimizer = torch.optim.AdamW([weight], lr=0.1, fused=True)
    check, before = FiniteCheck(), weight.detach().clone()
    for number, scale in ((1, 1.0), (2, float("nan"))):
        before = weight.detach().clone()
        loss = (weight * scale).sum()
        loss.backward()
        check.record({"loss": loss})
        check.queue(number, torch.nn.utils.clip_grad_norm_([weight], float("inf")), optimizer, scaled=False)
        assert check.pending.flag.device.type == "cpu"
        if weight.device.type == "cuda":
            assert check.pending.flag.is_pinned() and check.pending.copied is not None
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if number == 1:
            assert not torch.equal(weight.detach(), before)  # the finite update applied
    assert torch.equal(weight.detach(), before)  # the NaN one skipped on the device
    with pytest.raises(DataError, match=r"^step 2: the loss or its gradient is not finite \(loss nan"):
        check.resolve()
