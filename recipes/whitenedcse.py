"""WhitenedCSE training recipe (Zhuo et al., 2023, "WhitenedCSE: Whitening-based Contrastive Learning of Sentence
Embeddings").

    accelerate launch recipes/whitenedcse.py [--config recipes/configs/X.yaml] [--key value ...]
    accelerate launch -m csekit.recipes.whitenedcse [...]   (installed csekit)

Defaults are the paper's bert-base setting (see WhitenedCSEConfig): SimCSE's unsupervised training (wiki1m, 1 epoch,
batch 64, lr 3e-5, max length 32, temperature 0.05, [CLS]) with shuffled group whitening and several positives.
The paper's ablations are flags:

* Table 3: --whitening none|pca|zca|group|shuffled_group
* Table 4: the number of whitening groups (--num_groups) with --whitening shuffled_group or group (w/o shuffle)
* Table 5: paper positive number 2..5 = --num_positives 1..4
* loss: --loss_type L1|L2, --positive_weights; also --positive_source, --whitening_gradient,
  --inference_representation.
"""

from csekit.modeling import WhitenedCSEModel
from csekit.trainers import WhitenedCSETrainer
from csekit.trainers.recipe import ContrastiveRecipe, main_guard

RECIPE = ContrastiveRecipe(WhitenedCSEModel, WhitenedCSETrainer, output_dir="outputs/whitenedcse", description=__doc__)
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
