"""Where CMLM-CSE's two losses push the encoder: gradient norms of L_contrast and L_MLM on one batch.

    python benchmarks/cmlm_cse_gradients.py --model all-MiniLM-L6-v2 --pooler avg --extractor-layers 4 \
        --fusion-layers 2 --output benchmarks/results/cmlm_cse_gradients_fixed.md

On one training batch of the pretrained model, the gradient of each loss with respect to the encoder's trainable
parameters is split into the input word-embedding rows of the tokens the encoder reads, the rows of every other token,
and the rest of the encoder. The MLM head's vocabulary projection is the frozen extractor's word embeddings, so
L_MLM reaches the encoder only through the sentence embedding h: it can move only the rows of the batch's tokens
and never the others (when the projection was tied to the trained embeddings, it moved all of them). The second
table gives, for several lambda, the ratio of lambda * L_MLM's gradient on the encoder without the word embeddings
to L_contrast's: how strongly the conditional MLM can shape the sentence embedding at the start of training.
"""

import argparse
import shlex
import sys

import torch
from transformers import AutoTokenizer

from common import emit
from csekit.data import read_sentences, resolve_data_file
from csekit.loading import resolve_model_path
from csekit.modeling import CMLMCSEForPreTraining
from csekit.modeling.losses import info_nce_loss
from csekit.trainers import CMLMCSECollator


def split_norms(loss: torch.Tensor, named_parameters: list, batch_tokens: torch.Tensor) -> tuple:
    """Gradient norms ``(word-embedding rows of batch_tokens, the other word-embedding rows, every other encoder
    parameter)``."""
    gradients = torch.autograd.grad(loss, [p for _, p in named_parameters], allow_unused=True, retain_graph=True)
    squares = [0.0, 0.0, 0.0]
    for (name, parameter), gradient in zip(named_parameters, gradients):
        gradient = torch.zeros_like(parameter) if gradient is None else gradient.double()
        if "word_embeddings" in name:
            in_batch = torch.zeros(len(gradient), dtype=torch.bool)
            in_batch[batch_tokens.unique()] = True
            squares[0] += gradient[in_batch].pow(2).sum().item()
            squares[1] += gradient[~in_batch].pow(2).sum().item()
        else:
            squares[2] += gradient.pow(2).sum().item()
    return tuple(value ** 0.5 for value in squares)


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
    parser.add_argument("--train-file", default="wiki/wiki1m_for_simcse.txt", help="Sentences.")
    parser.add_argument("--seed", type=int, default=0, help="Seed for dropout and masking.")
    parser.add_argument("--output", default=None, help="Write the markdown table here (also printed).")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    model_path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    sentences = read_sentences(resolve_data_file(args.train_file), limit=args.batch_size)
    model = CMLMCSEForPreTraining.from_encoder(
        str(model_path), pooler_type=args.pooler, extractor_layers=args.extractor_layers,
        fusion_layers=args.fusion_layers, mask_rate=args.mask_rate,
    ).train()
    torch.manual_seed(args.seed)  # the same masking and dropout whatever model loading drew from the generator
    batch = CMLMCSECollator(tokenizer, max_length=args.max_length, config=model.config)(
        [{"sent0": sentence} for sentence in sentences]
    )
    encoder = [(n, p) for n, p in model.named_parameters() if not n.startswith("auxiliary.") and p.requires_grad]
    outputs = model(**batch)
    contrastive = info_nce_loss(outputs.embeddings[:, 0], outputs.embeddings[:, 1], temperature=args.temperature)
    tokens = batch["input_ids"]  # what the encoder reads (the masked copy goes only to the frozen extractor)
    contrastive_in, contrastive_out, contrastive_layers = split_norms(contrastive, encoder, tokens)
    mlm_in, mlm_out, mlm_layers = split_norms(outputs.mlm_loss, encoder, tokens)
    # one AdamW step (the Trainer's optimizer, lr 3e-5, no weight decay) on lambda * L_MLM alone, paper lambda
    word_embeddings = model.encoder.get_input_embeddings().weight
    before = word_embeddings.detach().clone()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-5, weight_decay=0.0)
    (0.005 * outputs.mlm_loss).backward()
    optimizer.step()
    step = (word_embeddings.detach() - before).abs().mean(1)
    in_batch = torch.zeros(len(step), dtype=torch.bool)
    in_batch[tokens.unique()] = True
    lines = [
        f"Command: `python benchmarks/cmlm_cse_gradients.py {shlex.join(argv if argv is not None else sys.argv[1:])}`",
        "",
        f"One batch of {len(sentences)} sentences, pretrained weights: L_contrast = {contrastive.item():.3g}, "
        f"L_MLM = {outputs.mlm_loss.item():.3g}.",
        "",
        f"| loss | grad norm on the word-embedding rows of the batch's {len(tokens.unique())} tokens | on the other "
        "rows | on the rest of the encoder |",
        "|---|---:|---:|---:|",
        f"| L_contrast | {contrastive_in:.4g} | {contrastive_out:.3g} | {contrastive_layers:.4g} |",
        f"| L_MLM (lambda = 1) | {mlm_in:.4g} | {mlm_out:.3g} | {mlm_layers:.4g} |",
        "",
        "| lambda | lambda x L_MLM / L_contrast, gradient norm on the encoder without the word embeddings |",
        "|---:|---:|",
        *[f"| {value:g} | {value * mlm_layers / contrastive_layers:.3g} |" for value in args.lambdas],
        "",
        "One AdamW step (lr 3e-5, no weight decay) on 0.005 x L_MLM alone, word-embedding rows:",
        "",
        "| rows | mean abs step | rows that moved |",
        "|---|---:|---:|",
        f"| the batch's {int(in_batch.sum())} tokens | {step[in_batch].mean():.3g} "
        f"| {int((step[in_batch] > 0).sum())} |",
        f"| the other {int((~in_batch).sum())} | {step[~in_batch].mean():.3g} | {int((step[~in_batch] > 0).sum())} |",
    ]
    emit("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
