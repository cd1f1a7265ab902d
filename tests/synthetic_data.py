"""A small data folder in every layout csekit reads, built by the tests in a temporary folder.

SentEval's ``senteval/downstream`` (STS12-16, STS-B, SICK, the transfer tasks), ``clustering/``, ``wiki/`` (wiki1m and a
WikiText-2 ``.raw`` file) and ``nli/``, with the file names, columns, headers, encodings and quirks of the real files
(SICK's CRLF line ends, TREC in latin-1, MRPC's byte-order mark, unscored STS15/16 lines, stackoverflow's trailing TAB).
The sentences come from a seeded generator over a small vocabulary. An STS gold score is the share of the four slots
(subject, verb, object, place) two sentences have in common, scaled to 0-5, so a bag-of-words encoder correlates with
it.

It is built in well under a second and a tiny model evaluates on it in seconds. No number measured on it stands for
a published one: tests whose oracle is a published score use the real data (``real_data`` marker, ``conftest.py``).
"""

import random
from pathlib import Path

SUBJECTS = ("a man", "a woman", "the child", "two dogs", "a cat", "the chef", "a girl", "three boys", "an old man",
            "the band", "a young woman", "the police officer")
VERBS = ("is playing", "is eating", "is riding", "is cutting", "is holding", "is watching", "is cooking",
         "is slicing", "is carrying", "is painting", "is throwing", "is reading")
OBJECTS = ("a guitar", "a horse", "an onion", "the ball", "a pizza", "a book", "the piano", "a bike", "a fish",
           "some potatoes", "a red car", "the newspaper")
PLACES = ("in the park", "on the street", "at home", "near the river", "in the kitchen", "on a stage",
          "in the snow", "at the beach", "in a small room", "under a tree", "on the grass", "in the city")
SLOTS = (SUBJECTS, VERBS, OBJECTS, PLACES)
NEWS_WORDS = ("parliament", "election", "minister", "economy", "budget", "senate", "protest", "treaty", "markets",
              "inflation", "court", "verdict", "ceasefire", "summit", "tariff", "strike")
POSITIVE = ("wonderful", "great", "moving", "funny", "brilliant", "charming")
NEGATIVE = ("boring", "awful", "dull", "terrible", "clumsy", "tedious")
TREC_LABELS = ("ABBR:abb", "DESC:manner", "ENTY:animal", "HUM:ind", "LOC:city", "NUM:date")
SICK_HEADER = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"
STS_YEARS = {  # the sub-datasets csekit.evaluation.sts reads, as SentEval names them
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
CLUSTERING = ("agnews", "biomedical", "googlenews_TS", "searchsnippets", "stackoverflow", "tweet")


class Generator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def slots(self) -> list:
        return [self.rng.randrange(len(choices)) for choices in SLOTS]

    @staticmethod
    def text(slots) -> str:
        return " ".join(choices[i] for choices, i in zip(SLOTS, slots)) + " ."

    def sentence(self) -> str:
        return self.text(self.slots())

    def pair(self) -> tuple:
        """Two sentences and a gold score: 5 x the share of slots they share, plus a little noise."""
        first = self.slots()
        changed = self.rng.sample(range(4), self.rng.randrange(5))
        second = [self.rng.choice([j for j in range(len(SLOTS[k])) if j != first[k]]) if k in changed else first[k]
                  for k in range(4)]
        score = min(5.0, max(0.0, 5 * (4 - len(changed)) / 4 + self.rng.uniform(-0.3, 0.3)))
        other = self.text(second)
        if not changed:  # no two sentences of a pair are the same text: their cosines would tie at 1
            other = other[: -len(" .")]
        return self.text(first), other, round(score, 3)

    def opinion(self, positive: bool) -> str:
        word = self.rng.choice(POSITIVE if positive else NEGATIVE)
        return f"{self.sentence()[:-2]} and it is {word} ."


def write(path: Path, lines, encoding: str = "utf-8", newline: str = "\n", final_newline: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = newline.join(lines) + (newline if final_newline else "")
    path.write_bytes(text.encode(encoding))


def sick_label(score: float) -> str:
    return "ENTAILMENT" if score >= 3.5 else "CONTRADICTION" if score <= 1.5 else "NEUTRAL"


def build_senteval(downstream: Path, gen: Generator) -> None:
    sts = downstream / "STS"
    for year, names in STS_YEARS.items():
        for name in names:
            pairs = [gen.pair() for _ in range(12)]
            unscored = {3} if year in ("STS15", "STS16") else set()  # real STS15/16 inputs have unscored lines
            write(sts / f"{year}-en-test" / f"STS.input.{name}.txt", [f"{a}\t{b}" for a, b, _ in pairs])
            write(sts / f"{year}-en-test" / f"STS.gs.{name}.txt",
                  ["" if i in unscored else f"{s:.3f}" for i, (_, _, s) in enumerate(pairs)])
    for split, count in (("train", 80), ("dev", 40), ("test", 40)):
        # the train split has vocabulary of its own, as the real one's genres differ from test's: a fit set that
        # adds it to the test split gives other statistics (the z-score fit-set test needs them apart)
        rows = []
        for i, (a, b, s) in enumerate(gen.pair() for _ in range(count)):
            if split == "train":
                a, b = (f"{text[:-2]} {' '.join(gen.rng.sample(NEWS_WORDS, 8))} ." for text in (a, b))
            rows.append(f"main-news\tMSRvid\t2012{split}\t{i:04d}\t{s:.3f}\t{a}\t{b}")
        write(sts / "STSBenchmark" / f"sts-{split}.csv", rows)
    for name, count in (("SICK_train.txt", 60), ("SICK_trial.txt", 30), ("SICK_test_annotated.txt", 40)):
        rows = [f"{i + 1}\t{a}\t{b}\t{s:.1f}\t{sick_label(s)}"
                for i, (a, b, s) in enumerate(gen.pair() for _ in range(count))]
        write(downstream / "SICK" / name, [SICK_HEADER, *rows], newline="\r\n")
    for task, (pos, neg), count in (("MR", ("rt-polarity.pos", "rt-polarity.neg"), 40),
                                    ("CR", ("custrev.pos", "custrev.neg"), 30),
                                    ("SUBJ", ("subj.objective", "subj.subjective"), 40),
                                    ("MPQA", ("mpqa.pos", "mpqa.neg"), 40)):
        write(downstream / task / pos, [gen.opinion(True) for _ in range(count)])
        write(downstream / task / neg, [gen.opinion(False) for _ in range(count)])
    for split, count in (("train", 80), ("dev", 20), ("test", 30)):
        labels = [i % 2 for i in range(count)]
        write(downstream / "SST" / "binary" / f"sentiment-{split}", [f"{gen.opinion(y == 1)}\t{y}" for y in labels])
        write(downstream / "SST" / "fine" / f"sentiment-{split}",
              [f"{i % 5} {gen.opinion(i % 5 >= 3)}" for i in range(count)])
    for name, count in (("train_5500.label", 60), ("TREC_10.label", 30)):
        lines = [f"{TREC_LABELS[i % 6]} what {gen.sentence()[:-2]} ?" for i in range(count)]
        lines[0] = lines[0].replace("what", "wh\u00e4t")  # TREC is latin-1, as SentEval reads it
        write(downstream / "TREC" / name, lines, encoding="latin-1")
    for name, count in (("msr_paraphrase_train.txt", 40), ("msr_paraphrase_test.txt", 20)):
        rows = [f"{int(s >= 2.5)}\t{1000 + i}\t{2000 + i}\t{a}\t{b}"
                for i, (a, b, s) in enumerate(gen.pair() for _ in range(count))]
        write(downstream / "MRPC" / name, [MRPC_HEADER, *rows])


def build_clustering(folder: Path, gen: Generator) -> None:
    for name in CLUSTERING:
        rows = []
        for label in range(4):  # a cluster per subject: its texts share their first words
            for _ in range(10):
                slots = gen.slots()
                slots[0] = label
                rows.append(f"{label + 1}\t{gen.text(slots)[:-2]}" + ("\t" if name == "stackoverflow" else ""))
        gen.rng.shuffle(rows)
        write(folder / f"{name}.tsv", rows, final_newline=name != "biomedical")  # as the real biomedical.tsv


def build_corpora(data: Path, gen: Generator, wiki_sentences: int) -> None:
    write(data / "wiki" / "wiki1m_for_simcse.txt", [gen.sentence() for _ in range(wiki_sentences)])
    article = [" = A synthetic article = ", ""] + [f" {gen.sentence()} {gen.sentence()} " for _ in range(30)]
    write(data / "wiki" / "wikitext-2-raw" / "wiki.test.raw", ["", *article, ""])  # WikiText's raw layout
    triplets = []
    for _ in range(64):
        premise, entailed, _ = gen.pair()
        triplets.append(f"{premise},{entailed},{gen.sentence()}")
    write(data / "nli" / "nli_for_simcse.csv", ["sent0,sent1,hard_neg", *triplets])
    rows = []
    for i in range(240):
        premise, hypothesis, score = gen.pair()
        label = {"ENTAILMENT": "entailment", "CONTRADICTION": "contradiction"}.get(sick_label(score), "neutral")
        rows.append(f"{'dev' if i % 2 else 'test'}\t{premise}\t{hypothesis}\t{label}")
    write(data / "nli" / "snli_devtest_pairs.tsv", ["split\tpremise\thypothesis\tlabel", *rows])


def build_data_dir(data: Path, seed: int = 0, wiki_sentences: int = 1024) -> Path:
    """Write the whole folder under ``data`` (created) and return it."""
    gen = Generator(seed)
    build_senteval(data / "senteval" / "downstream", gen)
    build_clustering(data / "clustering", gen)
    build_corpora(data, gen, wiki_sentences)
    return data


__all__ = ["Generator", "build_data_dir"]
