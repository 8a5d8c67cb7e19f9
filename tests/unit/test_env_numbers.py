"""Numbers from SGLANG_* environment variables: one parser, and a bad value names its variable."""

from __future__ import annotations

import importlib

import pytest

from sglang.utils.env import EnvValueError, env_flag, env_number


def test_unset_or_empty_gives_the_default_and_a_value_is_cast(monkeypatch):
    monkeypatch.delenv("SGLANG_TEST_N", raising=False)
    assert env_number("SGLANG_TEST_N", 6, int) == 6
    monkeypatch.setenv("SGLANG_TEST_N", "  ")
    assert env_number("SGLANG_TEST_N", 6, int) == 6
    monkeypatch.setenv("SGLANG_TEST_N", " 12 ")
    assert env_number("SGLANG_TEST_N", 6, int) == 12
    monkeypatch.setenv("SGLANG_TEST_N", "2.5")
    assert env_number("SGLANG_TEST_N", 1.0, float) == 2.5


@pytest.mark.parametrize("raw, cast, minimum, says", [("lots", int, None, "must be an integer"), ("2.5", int, None, "must be an integer"),
                                                       ("x", float, None, "must be a number"), ("nan", float, None, "must be a number, not NaN"), ("0", int, 1, "must be an integer >= 1")])
def test_a_bad_value_names_the_variable_the_value_and_the_default(monkeypatch, raw, cast, minimum, says):
    monkeypatch.setenv("SGLANG_TEST_N", raw)
    with pytest.raises(EnvValueError, match=rf"SGLANG_TEST_N='{raw}' {says} \(unset it for the default, 7\)"):
        env_number("SGLANG_TEST_N", 7, cast, minimum)


@pytest.mark.parametrize("module, var", [("sglang.srt.speculative.draft_policy", "SGLANG_SPEC_COMPUTE_KNEE"),
                                         ("sglang.srt.speculative.ngram_store", "SGLANG_SPEC_NGRAM_MAX_MB")])
def test_the_speculative_modules_refuse_a_bad_value_at_import_naming_it(monkeypatch, module, var):
    mod = importlib.import_module(module)
    monkeypatch.setenv(var, "many")
    try:
        with pytest.raises(EnvValueError, match=var):
            importlib.reload(mod)
    finally:
        monkeypatch.delenv(var)
        importlib.reload(mod)  # the module as the rest of the suite knows it


@pytest.mark.parametrize("raw, want", [("", False), ("1", True), ("TRUE", True), (" yes ", True), ("on", True), ("0", False),
                                       ("false", False), ("No", False), ("off", False)])
def test_a_switch_reads_the_usual_spellings(monkeypatch, raw, want):
    monkeypatch.setenv("SGLANG_TEST_FLAG", raw)
    assert env_flag("SGLANG_TEST_FLAG") is want


def test_a_switch_refuses_a_typo_naming_the_variable(monkeypatch):
    monkeypatch.setenv("SGLANG_TEST_FLAG", "ture")
    with pytest.raises(EnvValueError, match=r"SGLANG_TEST_FLAG='ture' must be one of 1, true, yes, on, 0, false, no, off"):
        env_flag("SGLANG_TEST_FLAG")
    monkeypatch.delenv("SGLANG_TEST_FLAG")
    assert env_flag("SGLANG_TEST_FLAG", True) is True
