"""The compiled training step, proved on the CPU: what a GPU needs from it, without a GPU.

On a GPU the step is bound by how many kernels Python launches, so it runs compiled (``--torch_compile true``): every
method's forward + losses must trace into one graph (no graph break: a break is a host read or a Python decision
inside the step, and each one splits the kernels and waits on the device), be recompiled a bounded number of times
over batches of varied lengths, and give the eager step's loss and gradients. ``fullgraph=True`` makes any graph
break an error; the ``aot_eager`` backend traces the backward too, without a C++ compiler.
"""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from csekit.methods import METHODS
from test_gradient_cache import build

CONTRASTIVE = [name for name, method in METHODS.items() if method.name != "clsr"]
# sentences of 4 different lengths: batches whose padded lengths all differ
SENTENCES = ["A man plays a guitar.", "Two dogs run through the deep snow of a large park on a cold day.",
             "A woman is slicing an onion.", "Kids play.", "The old bridge over the river was closed for repairs.",
             "A cat sleeps on the warm windowsill.", "Some people are dancing at a wedding party tonight.",
             "Rain."]
MAX_COMPILATIONS = 2  # over batches of any lengths: the first shape, then one graph generic in the lengths


def batches(trainer, count: int = 4) -> list:
    """``count`` padded batches of 8 examples, each of another padded length (the sentences cut to 2, 4, 6... words)."""
    collator = trainer.data_collator
    rows = [{"sent0": text, "sent1": SENTENCES[-1 - i], "example_index": i} for i, text in enumerate(SENTENCES)]
    columns = trainer.data_columns[0]
    out = []
    for length in range(count):
        cut = [{k: (" ".join(v.split()[: 2 * length + 2]) if k.startswith("sent") else v) for k, v in row.items()
                if k in columns or k == "example_index"} for row in rows]
        out.append(collator(cut))
    return out


def host_reads(graphs: list) -> list:
    """The operations of traced ``graphs`` whose value the host reads (each a wait on a GPU). Dynamo traces
    ``.item()`` into the graph rather than breaking it, so ``fullgraph`` alone does not keep them out."""
    reads = {"item", "tolist", "nonzero", "_local_scalar_dense", "equal", "is_nonzero", "masked_select", "unique"}
    return [node.format_node() for graph in graphs for node in graph.graph.nodes
            if getattr(node.target, "__name__", node.target) in reads]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name,packed", [(name, False) for name in CONTRASTIVE]
                         + [(name, True) for name in CONTRASTIVE if METHODS[name].packing])
def test_every_methods_step_compiles_whole_and_equals_the_eager_step(name, packed, backbones, tmp_path):
    """Forward + losses (``forward_losses``) in one graph (``fullgraph``), at most ``MAX_COMPILATIONS``
    compilations over batches of 4 lengths, and the compiled loss and gradients equal the eager ones (dropout off).
    Padded and packed: a packed batch is laid out on the device from its padded layout's width, with no host read
    (``PackedSequences.from_layout``, one attention call per layer), where the eager CPU step reads its lengths
    (``from_lengths``, blocks of similar lengths): the same loss from two layouts."""
    method = METHODS[name]
    trainer = build(method, backbones[0.0], tmp_path, "--padding_free", str(packed).lower())
    assert trainer.data_collator.padding_free is packed
    model = trainer.model.train()
    data = batches(trainer)
    assert len({tuple(b["input_ids"].shape) for b in data}) == len(data)  # the lengths differ

    def loss_and_gradients(compute):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)  # WhitenedCSE's shuffles draw from it
        losses = []
        for batch in data:
            loss = compute({k: v.clone() for k, v in batch.items()})
            loss.backward()
            losses.append(loss.detach())
            after_step = getattr(model, "after_optimizer_step", None)
            if after_step is not None:  # ESimCSE: the keys join the queue, so later batches meet a fuller one
                after_step()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return torch.stack(losses), grads

    state = {k: v.clone() for k, v in model.state_dict().items()}
    eager = loss_and_gradients(lambda batch: trainer.compute_loss(model, batch))
    model.load_state_dict(state)
    counter = CompileCounterWithBackend("aot_eager")
    compiled_loss = torch.compile(lambda batch: trainer.forward_losses(model, batch)[1]["loss"], backend=counter,
                                  fullgraph=True)
    compiled = loss_and_gradients(compiled_loss)
    assert 1 <= counter.frame_count <= MAX_COMPILATIONS
    assert not host_reads(counter.graphs)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-6)
    assert compiled[1].keys() == eager[1].keys()
    for key, gradient in eager[1].items():
        # the two packed layouts sum in different orders; WhitenedCSE's whitening amplifies that float32 rounding
        # to ~3e-6 in a few gradient entries (a wrong layout moves every entry by far more)
        torch.testing.assert_close(compiled[1][key], gradient, rtol=1e-4, atol=1e-5 if packed else 1e-6,
                                   msg=lambda message: f"{key}: {message}")


def test_clsrs_head_step_compiles_whole():
    """CLSR trains a head on cached vectors: its MLP, projection and NT-Xent trace into one graph."""
    from csekit.modeling.losses import nt_xent_loss

    mlp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    projection = torch.nn.Linear(16, 8)
    step = torch.compile(lambda v: nt_xent_loss(*projection(mlp(v)).chunk(2), 0.1), backend="aot_eager",
                         fullgraph=True)
    step(torch.randn(16, 16)).backward()
    assert mlp[0].weight.grad is not None


def test_torch_compile_pads_every_batch_to_one_length_unless_the_loss_counts_padding(backbones, tmp_path):
    """Under ``--torch_compile`` every padded batch has ``--max_seq_length`` positions, and so has every packed
    batch's layout: one shape, one compilation (and CUDA graphs possible) for padded batches, one layout width for
    packed ones; a method whose loss counts the padding (DiffCSE) refuses more padding."""
    trainer = build(METHODS["simcse"], backbones[0.0], tmp_path, "--torch_compile", "true", "--padding_free", "false")
    assert {tuple(b["input_ids"].shape) for b in batches(trainer)} == {(8, 2, 16)}
    packed = batches(build(METHODS["simcse"], backbones[0.0], tmp_path, "--torch_compile", "true",
                           "--padding_free", "true"))
    assert {tuple(b["attention_mask"].shape) for b in packed} == {(8, 2, 16)}
    assert all(torch.equal(b["attention_mask"].sum(-1), b["sequence_lengths"]) for b in packed)
    assert {tuple(b["input_ids"].shape[-1:]) for b in batches(build(METHODS["simcse"], backbones[0.0], tmp_path,
                                                                    "--padding_free", "false"))} != {(16,)}
    from csekit.errors import DataError

    with pytest.raises(DataError, match="counts the padded positions"):
        METHODS["diffcse"].recipe_module.RECIPE.parse(["--pad_to_multiple_of", "8"])
    assert METHODS["diffcse"].recipe_module.RECIPE.parse(["--torch_compile", "true"])[1].pad_to_multiple_of is None
    with pytest.raises(DataError, match="positive"):
        METHODS["simcse"].recipe_module.RECIPE.parse(["--pad_to_multiple_of", "-8"])


def test_torch_compile_keeps_packing_and_a_gpu_defaults_to_padded_batches():
    """``--torch_compile`` trains packed when ``--padding_free`` says so (a packed step compiles whole:
    ``test_every_methods_step_compiles_whole_and_equals_the_eager_step``); without a flag, the CPU packs and a GPU
    pads, compiled or not."""
    from csekit.recipes.simcse import RECIPE
    from csekit.trainers.runner import training_layout

    assert RECIPE.parse(["--torch_compile", "true", "--padding_free", "true"])[1].padding_free is True
    assert RECIPE.parse(["--torch_compile", "true", "--use_cpu", "true"])[1].padding_free is True
    assert RECIPE.parse(["--use_cpu", "true"])[1].padding_free is True
    assert RECIPE.parse(["--padding_free", "false"])[1].padding_free is False

    class OnGPU:
        torch_compile = False
        device = torch.device("cuda")

    assert training_layout(None, OnGPU())[0] is False
    assert training_layout(True, OnGPU())[0] is True


def test_the_first_log_line_says_which_step_runs_and_why():
    from csekit.recipes.simcse import RECIPE
    from csekit.trainers.runner import describe_step

    _, data_args, training_args, _ = RECIPE.parse(["--torch_compile", "true", "--padding_free", "true"])
    assert describe_step(training_args, data_args, True) == (
        "training step: compiled (--torch_compile), packed batches (--padding_free true), the packed layout padded to "
        "a multiple of 32")
    _, data_args, training_args, _ = RECIPE.parse(["--use_cpu", "true"])
    assert describe_step(training_args, data_args, True) == "training step: eager, packed batches (the default on " \
        "the CPU)"
