"""Hard-negative mining: ``hard_negatives`` (the algorithm, sentence-transformers' meaning of every option) and
``cli`` (``csekit mine``). Nothing here imports torch, so the command line parses without it."""

# how the negatives are taken among the kept candidates: the best ones, or drawn at random
SAMPLING = ("top", "random")
# the rows written: one per (anchor, positive, negative), or one per (anchor, positive) with its k negatives
OUTPUT_FORMATS = ("triplet", "n-tuple")
