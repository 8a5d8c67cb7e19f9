"""Building the fused CPU kernels: caching, compile errors, an unwritable cache (needs g++)."""

from __future__ import annotations

import pytest

from sglang.srt.layers.cpu_kernels.build import KernelBuildError, build

pytestmark = [pytest.mark.compiler]


def test_a_build_is_cached_and_a_changed_source_builds_anew(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "k.cpp"
    src.write_text('extern "C" int answer() { return 42; }\n')
    first = build(src, stem="k")
    stamp = first.stat().st_mtime_ns
    assert build(src, stem="k") == first and first.stat().st_mtime_ns == stamp  # no second compile
    src.write_text('extern "C" int answer() { return 43; }\n')
    second = build(src, stem="k")
    assert second != first and second.is_file() and first.is_file()
    assert not list((tmp_path / "cache").glob("*.tmp*"))  # written under a temporary name, then renamed


def test_a_compile_error_names_the_file_the_compiler_output_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "broken.cpp"
    src.write_text("int f( { return 0; }\n")
    with pytest.raises(KernelBuildError) as e:
        build(src, stem="broken")
    msg = str(e.value)
    assert msg.startswith("compiling broken.cpp with ") and "failed (exit" in msg
    assert "broken.cpp:1" in msg and "--fused-decode off" in msg
    assert not list((tmp_path / "cache").glob("*.so*"))


def test_an_unwritable_cache_says_which_variable_to_set(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SGLANG_KERNEL_CACHE", str(blocker / "cache"))
    with pytest.raises(KernelBuildError, match="cannot create the kernel cache .*set SGLANG_KERNEL_CACHE to a writable directory"):
        build()
