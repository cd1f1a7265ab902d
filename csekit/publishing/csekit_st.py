"""A sentence-transformers input module that runs a whole csekit model (encoder + pooler + head) as one step.

``csekit export-st`` copies this file into the exported folder and names it in ``modules.json``, so

    SentenceTransformer(folder, trust_remote_code=True)

loads the csekit model through its own ``auto_map`` code and returns exactly ``model.encode``'s embeddings, for
any csekit model class (heads and multi-layer poolers included). It imports only torch, transformers and
sentence-transformers, because it runs where csekit is not installed.
"""

from typing import Optional

from sentence_transformers.base.modules import InputModule
from transformers import AutoModel, AutoTokenizer


class CSEKitEncoder(InputModule):
    """Tokenize like ``encode`` (truncation at ``max_seq_length``, default the tokenizer's maximum) and return the
    csekit model's inference embeddings ``(batch, embedding_dimension)`` as ``sentence_embedding``.

    Args:
        model: a loaded csekit model (``SentenceEncoderPreTrainedModel`` subclass).
        tokenizer: its tokenizer.
        max_seq_length: truncation length; ``None`` keeps the tokenizer's model maximum, as ``encode`` does.
        embedding_dimension: size of the returned vectors (the head's output size).
    """

    config_keys = ["max_seq_length", "embedding_dimension"]
    config_file_name = "csekit_sentence_transformers.json"  # config.json is the csekit model's own

    def __init__(self, model, tokenizer, max_seq_length: Optional[int] = None,
                 embedding_dimension: Optional[int] = None):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.embedding_dimension = embedding_dimension or model.config.hidden_size

    def preprocess(self, inputs, prompt: Optional[str] = None, **kwargs) -> dict:
        texts = self._prepend_prompt(list(inputs), prompt) if prompt else list(inputs)
        length = dict(max_length=self.max_seq_length) if self.max_seq_length else {}
        return dict(self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt", **length))

    def forward(self, features: dict, **kwargs) -> dict:
        inputs = {key: features[key] for key in ("input_ids", "attention_mask", "token_type_ids") if key in features}
        features["sentence_embedding"] = self.model(**inputs).embeddings
        return features

    def get_embedding_dimension(self) -> int:
        return self.embedding_dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.model.save_pretrained(output_path, safe_serialization=safe_serialization)
        self.tokenizer.save_pretrained(output_path)
        self.save_config(output_path)

    @classmethod
    def load(
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token=None,
        cache_folder: Optional[str] = None,
        revision: Optional[str] = None,
        local_files_only: bool = False,
        trust_remote_code: bool = False,
        **kwargs,
    ) -> "CSEKitEncoder":
        hub = dict(subfolder=subfolder, token=token, cache_dir=cache_folder, revision=revision,
                   local_files_only=local_files_only)
        # the model code is the csekit auto_map code shipped next to the weights: same trust decision as this file
        model = AutoModel.from_pretrained(model_name_or_path, trust_remote_code=trust_remote_code, **hub)
        tokenizer = AutoTokenizer.from_pretrained(model_name_or_path, **hub)
        config = cls.load_config(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                                 revision=revision, local_files_only=local_files_only)
        return cls(model.eval(), tokenizer, **config)
