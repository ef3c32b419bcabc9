"""Runtime defaults chosen by name: n-gram match lengths."""

from __future__ import annotations

from specplug.runtime.models import ngram_match


def test_paced_lookup_also_drafts_from_one_token_matches():
    assert ngram_match(paced=True) == (1, 4)  # pacing keeps weak matches apart and sends them only when they pay
    assert ngram_match(paced=False) == (2, 4)  # a fixed k would send every weak match at full width


def test_given_match_lengths_win_and_stay_ordered():
    assert ngram_match(True, 3, 6) == (3, 6)
    assert ngram_match(False, None, 1) == (1, 1)  # only a longest given: the shortest never exceeds it
    assert ngram_match(True, 5, None) == (5, 5)
