"""Where CMLM-CSE's two losses push the encoder: gradient norms of L_contrast and L_MLM on one batch.

    python benchmarks/cmlm_cse_gradients.py --model all-MiniLM-L6-v2 --pooler avg --extractor-layers 4 \
        --fusion-layers 2 --output benchmarks/results/cmlm_cse_gradients.md

On one training batch of the pretrained model, the gradient of each loss with respect to the encoder's trainable
parameters is split into the input word embeddings (which the MLM head's output projection is tied to) and the rest
of the encoder, which L_MLM reaches only through the sentence embedding h. The table gives the norms and, for
several lambda, the ratio of lambda * L_MLM's gradient on the encoder layers to L_contrast's: how strongly the
conditional MLM can shape the sentence embedding at the start of training.
"""

import argparse
import shlex
import sys

import torch
from common import emit
from transformers import AutoTokenizer

from csekit.modeling import CMLMCSEForPreTraining
from csekit.modeling.losses import info_nce_loss
from csekit.trainers import CMLMCSECollator
from csekit.data import read_sentences, resolve_data_file
from csekit.loading import resolve_model_path


def split_norms(loss: torch.Tensor, named_parameters: list) -> tuple:
    """``(word-embedding gradient norm, gradient norm of every other encoder parameter)``."""
    gradients = torch.autograd.grad(loss, [p for _, p in named_parameters], allow_unused=True, retain_graph=True)
    squares = {True: 0.0, False: 0.0}
    for (name, _), gradient in zip(named_parameters, gradients):
        if gradient is not None:
            squares["word_embeddings" in name] += gradient.double().pow(2).sum().item()
    return squares[True] ** 0.5, squares[False] ** 0.5


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="Backbone (folder or 'all-MiniLM-L6-v2').")
    parser.add_argument("--pooler", default="avg", help="Pooler type.")
    parser.add_argument("--extractor-layers", type=int, default=4, help="Frozen extractor blocks.")
    parser.add_argument("--fusion-layers", type=int, default=2, help="Fusioner blocks.")
    parser.add_argument("--mask-rate", type=float, default=0.15, help="MLM mask rate.")
    parser.add_argument("--temperature", type=float, default=0.05, help="InfoNCE temperature.")
    parser.add_argument("--batch-size", type=int, default=64, help="Sentences in the batch.")
    parser.add_argument("--max-length", type=int, default=32, help="Truncation length.")
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.0005, 0.005, 0.05], help="MLM weights.")
    parser.add_argument("--train-file", default="wiki/wiki1m_for_simcse.head11914.txt", help="Sentences.")
    parser.add_argument("--seed", type=int, default=0, help="Seed for dropout and masking.")
    parser.add_argument("--output", default=None, help="Write the markdown table here (also printed).")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    model_path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    sentences = read_sentences(resolve_data_file(args.train_file))[: args.batch_size]
    model = CMLMCSEForPreTraining.from_encoder(
        str(model_path), pooler_type=args.pooler, extractor_layers=args.extractor_layers,
        fusion_layers=args.fusion_layers, mask_rate=args.mask_rate,
    ).train()
    batch = CMLMCSECollator(tokenizer, max_length=args.max_length, config=model.config)(
        [{"sent0": sentence} for sentence in sentences]
    )
    encoder = [(n, p) for n, p in model.named_parameters() if not n.startswith("auxiliary.") and p.requires_grad]
    outputs = model(**batch)
    contrastive = info_nce_loss(outputs.embeddings[:, 0], outputs.embeddings[:, 1], temperature=args.temperature)
    contrastive_words, contrastive_layers = split_norms(contrastive, encoder)
    mlm_words, mlm_layers = split_norms(outputs.mlm_loss, encoder)
    lines = [
        f"Command: `python benchmarks/cmlm_cse_gradients.py {shlex.join(argv if argv is not None else sys.argv[1:])}`",
        "",
        f"One batch of {len(sentences)} sentences, pretrained weights: L_contrast = {contrastive.item():.3g}, "
        f"L_MLM = {outputs.mlm_loss.item():.3g}.",
        "",
        "| loss | grad norm on the word embeddings | grad norm on the rest of the encoder |",
        "|---|---:|---:|",
        f"| L_contrast | {contrastive_words:.3g} | {contrastive_layers:.3g} |",
        f"| L_MLM (lambda = 1) | {mlm_words:.3g} | {mlm_layers:.3g} |",
        "",
        "| lambda | lambda x L_MLM / L_contrast, gradient norm on the encoder without the word embeddings |",
        "|---:|---:|",
        *[f"| {value:g} | {value * mlm_layers / contrastive_layers:.3g} |" for value in args.lambdas],
    ]
    emit("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
