"""A token estimate that needs no tokenizer: for comparing a request before and after."""


def estimate_tokens(text: str) -> int:
    """About four characters a token: good enough to compare before and after."""
    return tokens_for(len(text))


def tokens_for(chars: int) -> int:
    """``estimate_tokens`` of a text of ``chars`` characters (without the text at hand)."""
    return (chars + 3) // 4
