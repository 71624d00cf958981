"""How values and errors appear inside the store's error messages."""


def shown(value: object, limit: int = 60) -> str:
    """A value for an error message: its repr, cut short so a huge id cannot flood the message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def one_line(error: Exception) -> str:
    return " ".join(str(error).split())
