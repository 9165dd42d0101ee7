"""``shared_prefix.hit_rate``: the prefix length (or share) solved for a target prompt-token prefix-cache hit rate,
and the profile errors that name file:line and the field."""

from __future__ import annotations

import pytest

from tailscope.errors import ProfileError
from tailscope.io.profile import parse_profile
from tailscope.workload.profile import SharedPrefix, prefix_for_hit_rate

PROFILE = """\
name: aim
classes:
  - {name: short, input_tokens: 200, output_tokens: 4, weight: 3}
  - {name: long, input_tokens: 600, output_tokens: 4}
shared_prefix: SP
arrival: {mode: open, rate: 1}
stop: {requests: 3}
"""


def _parse(sp: str) -> SharedPrefix | None:
    return parse_profile(PROFILE.replace("SP", sp), source="aim.yaml").shared_prefix


def test_the_solved_prefix_gives_the_hit_rate() -> None:
    for rate, mean in ((0.5, 300.0), (0.2, 1000.0), (0.9, 64.0)):
        tokens, share = prefix_for_hit_rate(rate, mean)
        assert share == 1.0
        assert share * tokens / (mean + share * tokens) == pytest.approx(rate, abs=0.01)
        tokens, share = prefix_for_hit_rate(rate, mean, tokens=tokens * 2)
        assert share == pytest.approx(0.5, abs=0.01)  # twice the length on half the requests
    assert prefix_for_hit_rate(0.5, 300.0, share=0.5) == (600, 0.5)


def test_a_profile_solves_its_prefix_from_the_weighted_mean_prompt() -> None:
    # the classes' mean own prompt: (3 × 200 + 600) / 4 = 300 tokens
    assert _parse("{hit_rate: 0.5}") == SharedPrefix(300, 1, 1.0, hit_rate=0.5)
    assert _parse("{hit_rate: 0.5, tokens: 600, variants: 4}") == SharedPrefix(600, 4, 0.5, hit_rate=0.5)
    assert _parse("{tokens: 50}") == SharedPrefix(50, 1, 1.0)  # without a target: as given


@pytest.mark.parametrize(
    ("sp", "expected"),
    [
        ("{hit_rate: 0.5, tokens: 100}", "aim.yaml:5: shared_prefix.hit_rate a prefix of 100 tokens on every request "
         "gives at most 25%"),
        ("{hit_rate: 0.5, tokens: 100, share: 1}", "aim.yaml:5: shared_prefix.hit_rate give tokens or share"),
        ("{variants: 2}", "aim.yaml:5: shared_prefix.tokens is required (or give hit_rate"),
        ("{hit_rate: 1}", "aim.yaml:5: shared_prefix.hit_rate must be less than 1"),
        ("{hit_rate: 0.99999}", "aim.yaml:5: shared_prefix.hit_rate needs a prefix of"),
    ],
)  # fmt: skip
def test_an_unreachable_target_names_file_line_and_field(sp: str, expected: str) -> None:
    with pytest.raises(ProfileError) as info:
        _parse(sp)
    assert str(info.value).startswith(expected), str(info.value)
