"""SimCSE's trainer: its loss is the paper's objective on the model's views (Gao et al., 2021, eq. 1 and eq. 5)."""

import math

import pytest
import torch
from transformers import TrainingArguments

from conftest import loss_settings, tiny_bert_config
from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.trainers import ContrastiveCollator, SimCSETrainer

SENTENCES = ["a man plays a guitar .", "two dogs run in the park .", "a woman slices an onion .",
             "the chef is cooking pasta .", "a child rides a red bike .", "three boys kick a ball ."]


def paper_objective(views: torch.Tensor, temperature: float, weight: float) -> float:
    """Eq. 1 (two views) or eq. 5 (a third view as hard negatives), written out per anchor; the hard-negative weight
    is added to the anchor's own hard-negative logit after the temperature, as the authors' ``cl_forward`` does."""
    def cos(a, b):
        return float(torch.dot(a, b) / (a.norm() * b.norm()))

    total, batch = 0.0, views.shape[0]
    for i in range(batch):
        anchor = views[i, 0]
        terms = [math.exp(cos(anchor, views[j, 1]) / temperature) for j in range(batch)]
        if views.shape[1] > 2:
            terms += [math.exp(cos(anchor, views[j, 2]) / temperature + (weight if i == j else 0.0))
                      for j in range(batch)]
        total += -math.log(math.exp(cos(anchor, views[i, 1]) / temperature) / sum(terms))
    return total / batch


@pytest.mark.parametrize("settings", loss_settings("simcse"))
@pytest.mark.parametrize("supervised", [False, True])
def test_trainer_loss_is_the_papers_objective_on_the_models_views(tokenizer, tmp_path, supervised, settings):
    torch.manual_seed(0)
    config = SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type="cls", **settings)
    model = SimCSEModel(config).train()  # dropout on: the two views of a sentence differ
    features = ([{"sent0": a, "sent1": b, "hard_neg": c} for a, b, c in zip(SENTENCES, SENTENCES[1:], SENTENCES[2:])]
                if supervised else [{"sent0": s} for s in SENTENCES])
    batch = ContrastiveCollator(tokenizer, max_length=16)(features)
    trainer = SimCSETrainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to="none",
                                                                use_cpu=True))
    with torch.no_grad():
        outputs = model(**batch)
        losses = trainer.compute_losses(model, outputs, batch)
    views = outputs.embeddings
    assert views.shape[1] == (3 if supervised else 2)
    expected = paper_objective(views.double(), temperature=config.temperature, weight=config.hard_negative_weight)
    assert losses["loss"].item() == pytest.approx(expected, rel=1e-5)
    assert losses["contrastive"] is losses["loss"]
