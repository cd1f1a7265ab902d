"""The instruction prompt a csekit model prepends to every sentence. The module imports nothing, so a model card
reads it from ``config.json`` without loading torch."""


def default_prompt(prompt, sentence_transformers_settings) -> str:
    """The text a model prepends to every sentence: its ``prompt``, else the default prompt of the
    sentence-transformers folder it was trained from (its ``sentence_transformers_settings``), else ``""``."""
    if prompt is not None:
        return prompt
    settings = sentence_transformers_settings or {}
    return (settings.get("prompts") or {}).get(settings.get("default_prompt_name"), "") or ""


__all__ = ["default_prompt"]
