"""Recorded third-party schemas (with their sources) used to validate deploy renders in the tests."""
