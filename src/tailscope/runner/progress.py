"""Live counters of a running load test (written by the load generator, read by the progress display)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class Progress:
    """Counters updated from the event loop; read (racily, which is fine for display) from the display thread."""

    total: int | None = None
    duration_s: float | None = None
    sent: int = 0
    done: int = 0
    failed: int = 0
    in_flight: int = 0
    output_tokens: int = 0
    elapsed_s: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    _recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=64))

    def note_tokens(self, t_s: float) -> None:
        """Remember (time, cumulative output tokens) for the 'tok/s now' figure."""
        self._recent.append((t_s, self.output_tokens))

    def tokens_per_s_now(self) -> float:
        """Output tokens/s over the last few seconds."""
        if len(self._recent) < 2:
            return 0.0
        (t_a, n_a), (t_b, n_b) = self._recent[0], self._recent[-1]
        if t_b - t_a > 5.0:
            while len(self._recent) > 2 and self._recent[-1][0] - self._recent[0][0] > 5.0:
                self._recent.popleft()
            (t_a, n_a) = self._recent[0]
        return (n_b - n_a) / (t_b - t_a) if t_b > t_a else 0.0
