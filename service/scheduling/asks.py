"""What a sampler's ask may answer instead of a configuration."""


class SpaceExhausted(Exception):
    """Nothing new is left to try: every point of a finite search space has been, or the
    engine has run its generations. The study's budget shrinks to the trials it has, and
    `reason` becomes its finish reason."""

    def __init__(self, message: str, reason: str = "search space exhausted") -> None:
        super().__init__(message)
        self.reason = reason


class SamplerWaits(Exception):
    """The sampler proposes nothing more until trials in flight are told (CompileIQ's engine
    between generations); the step asks again once they are."""
