"""Runtime defaults chosen by name: n-gram match lengths; a drafter folder's draft vocabulary."""

from __future__ import annotations

import pytest

from specplug.runtime.models import ngram_match


def test_paced_lookup_also_drafts_from_one_token_matches():
    assert ngram_match(paced=True) == (1, 4)  # pacing keeps weak matches apart and sends them only when they pay
    assert ngram_match(paced=False) == (2, 4)  # a fixed k would send every weak match at full width


def test_given_match_lengths_win_and_stay_ordered():
    assert ngram_match(True, 3, 6) == (3, 6)
    assert ngram_match(False, None, 1) == (1, 1)  # only a longest given: the shortest never exceeds it
    assert ngram_match(True, 5, None) == (5, 5)


def test_a_bad_draft_vocabulary_file_is_a_clear_error(tmp_path):
    from specplug.errors import SpecplugError
    from specplug.runtime.models import DRAFT_VOCAB_FILE, draft_vocab

    (tmp_path / "config.json").write_text("{}")
    assert draft_vocab(str(tmp_path)) is None  # none listed: the drafter scores every token
    (tmp_path / DRAFT_VOCAB_FILE).write_text('{"ids": [3, 1, 2]}')
    assert draft_vocab(str(tmp_path)) == [3, 1, 2]
    for bad in ("[3, 1]", '{"ids": ["a"]}', "{"):
        (tmp_path / DRAFT_VOCAB_FILE).write_text(bad)
        with pytest.raises(SpecplugError, match="Cannot read the draft vocabulary"):
            draft_vocab(str(tmp_path))
