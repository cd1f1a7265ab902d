"""What a training step costs besides its kernels, counted on the CPU through ``Trainer.train()``.

On a GPU the step is launch-bound: every host read of a device value (``bool(t)``, ``t.item()``, ``t.tolist()``...)
waits for the queue to drain, and per-step Python work delays the next launch. Both are counted here while the real
``Trainer.train()`` loop runs steps 3 to 6 (the first steps compile and warm up; no step logs or saves in that
window): host reads through a ``TorchFunctionMode`` that sees every tensor method, module walks through
``nn.Module.named_modules``.
"""

import contextlib
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from torch.overrides import TorchFunctionMode
from transformers import TrainerCallback, TrainingArguments

from csekit.modeling import SimCSEModel
from csekit.trainers import CSETrainingArguments, SimCSETrainer

HOST_READS = {"item", "__bool__", "tolist", "__int__", "__float__", "__index__", "cpu", "numpy", "nonzero"}
FIRST, STEPS = 2, 4  # counted: the steps after the first FIRST, STEPS of them


def caller_file(frame) -> str:
    """The name of the first file outside torch on ``frame``'s stack."""
    while frame is not None and "/torch/" in frame.f_code.co_filename:
        frame = frame.f_back
    return Path(frame.f_code.co_filename).name if frame is not None else "?"


class HostReads(TorchFunctionMode):
    """Counts the tensor methods that read a device value on the host, by the file that called them; and for each
    read in ``finite.py`` (the finite check), the step whose tensor it read (``made``: every tensor that file
    computed, by step)."""

    def __init__(self):
        super().__init__()
        self.counting, self.places = False, Counter()
        self.step, self.made, self.finite_reads = 0, {}, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if torch.compiler.is_compiling():  # the model's traced code: its reads are the graph's
            return func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        caller = caller_file(sys._getframe(1))
        if self.counting and name in HOST_READS:
            self.places[f"{caller}:{name}"] += 1
            if caller == "finite.py":
                self.finite_reads.append((self.step, self.made.get(id(args[0]), (None,))[0]))
        result = func(*args, **(kwargs or {}))
        if caller == "finite.py" and isinstance(result, torch.Tensor):
            self.made[id(result)] = (self.step, result)  # the tensor kept: its id is not reused
        return result


class Window(TrainerCallback):
    """Turns ``counter.counting`` on for the steps after the first ``FIRST`` (``on_step_begin`` .. ``on_step_end``)
    and tells it the step."""

    def __init__(self, counter):
        self.counter = counter

    def on_step_begin(self, args, state, control, **kwargs):
        self.counter.counting = state.global_step >= FIRST
        self.counter.step = state.global_step

    def on_step_end(self, args, state, control, **kwargs):
        self.counter.counting = False


def train_counting(backbone: Path, output_dir: Path, counter, arguments=CSETrainingArguments, **settings) -> None:
    """Unsupervised SimCSE on the tests' backbone, ``FIRST + STEPS`` steps of 8 sentences, no evaluation, logging or
    save inside the window, ``counter`` counting in it."""
    model = SimCSEModel.from_encoder(str(backbone), pooler_type="cls")
    args = arguments(output_dir=str(output_dir), per_device_train_batch_size=8, max_steps=FIRST + STEPS,
                     logging_steps=100, save_strategy="no", eval_strategy="no", report_to="none", use_cpu=True,
                     disable_tqdm=True, **({"load_best_model_at_end": False} if arguments is CSETrainingArguments
                                          else {}), **settings)
    sentences = [f"sentence {i} about the {['red', 'old', 'new'][i % 3]} harbour" for i in range(64)]
    trainer = SimCSETrainer(model=model, args=args, train_dataset=Dataset.from_dict({"sent0": sentences}),
                            callbacks=[Window(counter)])
    with counter if isinstance(counter, TorchFunctionMode) else contextlib.nullcontext():
        trainer.train()


@pytest.mark.parametrize("arguments", [CSETrainingArguments, TrainingArguments], ids=["csekit", "transformers"])
def test_a_compiled_step_reads_the_host_once_through_trainer_train(arguments, tiny_backbone, tmp_path):
    """Under ``--torch_compile`` a step reads one value on the host: csekit's finite check, and of the update before
    (queued then, copied to the host without waiting: by the next update the device is past it), so the read never
    waits for the step's own backward. transformers' filter of non-finite logged losses (two reads a step) is off,
    with csekit's arguments and with a caller's plain ``TrainingArguments``; the model's own reads (view lengths,
    attention mask) are traced away."""
    reads = HostReads()
    train_counting(tiny_backbone, tmp_path, reads, arguments, torch_compile=True, torch_compile_backend="aot_eager")
    assert sum(reads.places.values()) <= STEPS, reads.places
    assert set(reads.places) == {"finite.py:__bool__"}, reads.places  # csekit's finite check
    assert len(reads.finite_reads) == STEPS, reads.finite_reads
    assert all(made is not None and made < step for step, made in reads.finite_reads), reads.finite_reads


def test_an_eager_step_reads_the_host_only_where_the_model_must(tiny_backbone, tmp_path):
    """Eager, the model adds its two reads (whether the views have one length, whether the mask has padding), and
    nothing reads the loss for the log between logging steps."""
    reads = HostReads()
    train_counting(tiny_backbone, tmp_path, reads)
    assert sum(reads.places.values()) <= 3 * STEPS, reads.places
    assert all(count == STEPS for count in reads.places.values()), reads.places


def test_a_step_walks_no_module_besides_reading_the_parameters(tiny_backbone, tmp_path, monkeypatch):
    """Besides the optimizer's reads of the parameters (clearing and clipping the gradients), nothing walks the
    model's modules at a step: transformers' ``total_flos`` estimate counts the parameters once per run (it walked
    every module at every step), and the trainer unwraps the model once per wrapper (accelerate's ``unwrap_model``
    walks every module looking for compiled regions)."""
    import traceback

    walks = Counter()
    named_modules = torch.nn.Module.named_modules

    class Walks:
        counting = False

    def counted(module, *args, **kwargs):
        if Walks.counting and not any(frame.name == "_named_members" for frame in traceback.extract_stack()):
            caller = [frame for frame in traceback.extract_stack()[:-1] if "/torch/" not in frame.filename][-1]
            walks[f"{Path(caller.filename).name}:{caller.name}"] += 1
        return named_modules(module, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "named_modules", counted)
    train_counting(tiny_backbone, tmp_path, Walks)
    assert not walks, walks


def test_torch_compile_traces_the_loss_into_the_steps_graph(tiny_backbone, tmp_path, monkeypatch):
    """``--torch_compile`` compiles the step the user runs: the graphs compiled during ``Trainer.train()`` hold the
    contrastive loss (its log-softmax over the similarity matrix), not the model's forward alone, compiled once."""
    compile_ = torch.compile
    graphs = []

    def recording(backend):
        def record(graph, example_inputs):
            graphs.append(graph)
            return (backend if callable(backend) else torch._dynamo.lookup_backend(backend))(graph, example_inputs)
        return record

    monkeypatch.setattr(torch, "compile", lambda *args, backend="inductor", **kwargs: compile_(
        *args, backend=recording(backend), **kwargs))
    train_counting(tiny_backbone, tmp_path, SimpleNamespace(counting=False), torch_compile=True,
                   torch_compile_backend="aot_eager")
    operations = {str(node.target) for graph in graphs for node in graph.graph.nodes if node.op == "call_function"}
    assert any("log_softmax" in name or "cross_entropy" in name for name in operations), sorted(operations)
    assert len(graphs) == 1  # one graph for the 6 steps: no recompilation as the trainer's state moves on


# ------------------------------------------------------------------------------------------------ collation workers
def test_loader_workers_default_to_an_accelerator_and_collate_the_main_process_batches(tiny_backbone, tmp_path,
                                                                                      monkeypatch):
    """``CSETrainingArguments`` collates in worker processes on an accelerator (off the step's path) and in the main
    process on the CPU; an explicit count is kept. Workers give the main process's batches, random draws included
    (ESimCSE's word repetition, seeded per example), over two epochs."""
    from csekit.modeling import ESimCSEForPreTraining
    from csekit.trainers import ESimCSETrainer
    from csekit.trainers.arguments import ACCELERATOR_LOADER_WORKERS

    settings = dict(output_dir=str(tmp_path / "args"), report_to="none", eval_strategy="no",
                    load_best_model_at_end=False, save_strategy="no")
    assert CSETrainingArguments(**settings).dataloader_num_workers == 0  # (this machine: the CPU)
    assert CSETrainingArguments(**settings, dataloader_num_workers=3).dataloader_num_workers == 3
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    on_gpu = CSETrainingArguments(**settings, use_cpu=False)
    assert on_gpu.dataloader_num_workers == ACCELERATOR_LOADER_WORKERS > 0
    monkeypatch.undo()

    sentences = [f"sentence {i} tells of the {['red', 'old', 'quiet'][i % 3]} harbour in the evening"
                 for i in range(32)]

    def batches(workers: int) -> list:
        args = CSETrainingArguments(**{**settings, "output_dir": str(tmp_path / str(workers))},
                                    per_device_train_batch_size=8, dataloader_num_workers=workers, use_cpu=True)
        trainer = ESimCSETrainer(model=ESimCSEForPreTraining.from_encoder(str(tiny_backbone), pooler_type="cls"),
                                 args=args, train_dataset=Dataset.from_dict({"sent0": sentences}))
        loader, out = trainer.get_train_dataloader(), []
        for epoch in range(2):
            trainer.data_collator.set_epoch(epoch)  # (the trainer's callback at each epoch's start)
            torch.manual_seed(epoch)
            out += list(loader)
        return out

    main, workers = batches(0), batches(2)
    assert len(main) == len(workers) == 8
    for ours, theirs in zip(main, workers):
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[key], theirs[key]) for key in ours)
