"""The codec's one error type: the peer (or the disk) sent bytes we cannot decode."""


class DecodeError(ValueError):
    """Malformed input: names the message type (or frame) and what was wrong with it."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.what = what
        self.reason = reason
