"""CMLM-CSE training recipe (Zhang & Chen, "CMLM-CSE: Based on Conditional MLM Contrastive Learning for Sentence
Embeddings"): SimCSE plus a conditional-MLM auxiliary network used only in training.

    accelerate launch recipes/cmlm_cse.py [--config recipes/configs/X.yaml] [--key value ...]
    accelerate launch -m csekit.recipes.cmlm_cse [...]      (installed csekit)

Defaults are the paper's BERT-base setting: unsupervised SimCSE (wiki1m, batch 64, lr 3e-5, length 32, [CLS] + MLP
in training only, temperature 0.05) with a frozen 8-block lexical extractor, a 3-block fusioner (started from the
pretrained blocks 9-11), mask rate 15% and lambda 0.005. The auxiliary MLM head is the backbone's pretrained one
(a backbone saved without one, such as the embedded MiniLM, gets a fresh head, and the log says so), projecting onto
the frozen pretrained word embeddings. The final model folder holds only the encoder + pooler; checkpoints keep the
auxiliary network.

The paper's ablations are flags:

* Table 2  --mlm_weight 0 (without MLM loss), --contrastive_weight 0 (without contrastive loss)
* Table 3  --contrastive_augmentation word_repetition (--word_repetition_rate 0.32) or drop_one_word
* Table 4  --mask_rate 0.15 ... 0.45
* Table 5  --mlm_weight 0 ... 0.1
* Table 6  --extractor_layers K --fusion_layers F (K + F <= the encoder's layers with the default
           --fusion_init next_layers: MiniLM has 6), --fusion_init top_layers / random
"""

from csekit.methods import get_method
from csekit.recipe_run import ContrastiveRecipe, main_guard
from csekit.trainers.augmentations import AugmentationArguments, contrastive_augmentation
from csekit.trainers.cmlm_cse import CMLMCSECollator


def make_collator(tokenizer, model, data_args, augmentation: AugmentationArguments) -> CMLMCSECollator:
    augment = contrastive_augmentation(augmentation.contrastive_augmentation, augmentation.word_repetition_rate)
    return CMLMCSECollator(tokenizer, max_length=data_args.max_seq_length, augment=augment, config=model.config,
                           padding_free=data_args.padding_free)


RECIPE = ContrastiveRecipe(get_method("cmlm_cse"), extra_arguments=AugmentationArguments, make_collator=make_collator,
                           description=__doc__)
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
