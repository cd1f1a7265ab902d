"""How exact packed batches are: one SimCSE training step (loss and every parameter gradient) on a packed batch
against the same step on the padded batch, in float32 and float64, for BERT, RoBERTa and ModernBERT (a local window
of 8 tokens, shorter than most of the sentences).

Tiny random backbones (2 layers, hidden 32, dropout 0, the families' configs as ``tests/test_backbones.py`` builds
them) and 8 sentences of 1 to 20 random tokens. Reported: the loss difference, and the largest gradient difference
over all parameters relative to the largest gradient. Gradients that are zero in exact arithmetic (attention key
biases: softmax ignores a constant added to every logit) are rounding noise on both paths and are left out of the
per-tensor view by taking the global one.

    python benchmarks/packing_exactness.py [--output DIR]
"""

import argparse
import shlex
import sys
from pathlib import Path

import torch

from common import emit, machine_description, write_outputs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from csekit.modeling import SimCSEConfig, SimCSEModel  # noqa: E402
from test_backbones import loss_and_gradients, padded_and_packed, tiny_config  # noqa: E402

LENGTHS = [3, 17, 12, 5, 20, 9, 1, 14]


def measure(family: str, dtype: torch.dtype) -> dict:
    torch.manual_seed(0)
    config = tiny_config(family)
    model = SimCSEModel(SimCSEConfig(encoder_config=config.to_dict(), pooler_type="avg")).to(dtype).train()
    padded, packed = padded_and_packed(LENGTHS, config.pad_token_id or 0)
    padded_loss, padded_grads = loss_and_gradients(model, padded)
    model.use_packed_attention()
    packed_loss, packed_grads = loss_and_gradients(model, packed)
    reference = torch.cat([grad.flatten() for grad in padded_grads.values()])
    difference = torch.cat([(packed_grads[name] - grad).flatten() for name, grad in padded_grads.items()])
    return {"family": family, "dtype": str(dtype).removeprefix("torch."),
            "loss_difference": abs(packed_loss - padded_loss).item(),
            "relative_gradient_difference": (difference.abs().max() / reference.abs().max()).item()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=None, help="Folder for packing_exactness.json and .md.")
    args = parser.parse_args()
    rows = [measure(family, dtype) for dtype in (torch.float32, torch.float64)
            for family in ("bert", "roberta", "modernbert")]
    command = " ".join(["python benchmarks/packing_exactness.py", shlex.join(sys.argv[1:])]).strip()
    lines = [f"Command: `{command}`", f"Machine: {machine_description()}", "",
             "| backbone | dtype | loss difference | max gradient difference / max gradient |", "|---|---|---|---|"]
    lines += [f"| {r['family']} | {r['dtype']} | {r['loss_difference']:.1e} | {r['relative_gradient_difference']:.1e} |"
              for r in rows]
    table = "\n".join(lines)
    emit(table)
    if args.output:
        write_outputs(args.output, "packing_exactness", {"rows": rows}, table)


if __name__ == "__main__":
    main()
