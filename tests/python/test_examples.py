"""Smoke tests of examples/train_llama.py and bench/e2e/run_e2e.py on CPU: tiny Llama dimensions,
2 training steps, in this process (so transformers is imported once). Training runs are skipped
with the reason where transformers, the attention implementation or the flashtrain extension is
missing (CI has Debian's torch 1.13 and no transformers); --help and the report writer always run."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO, "examples", "train_llama.py")
RUNNER = os.path.join(REPO, "bench", "e2e", "run_e2e.py")
TINY_VOCAB = 512  # train_llama's --tiny vocabulary: the first loss is near ln(512)


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torch_at_least(major, minor):
    parts = torch.__version__.split("+")[0].split(".")
    return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (major, minor)


def _skip_unless_available(attn):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    if attn == "sdpa" and not _torch_at_least(2, 1):
        pytest.skip("transformers' sdpa attention needs torch >= 2.1.1; this is torch %s"
                    % torch.__version__)
    if attn == "flashtrain":
        if not hasattr(transformers, "AttentionInterface"):
            pytest.skip("transformers %s has no AttentionInterface (flashtrain's integration needs "
                        ">= 4.48)" % transformers.__version__)
        try:
            import flashtrain  # noqa: F401  (loads the compiled extension)
        except ImportError as exc:
            pytest.skip("the flashtrain extension is not importable: %s" % exc)


_RUNS = {}


def _train(tmp_path_factory, attn):
    """train_llama.main() for 2 steps with `attn`, once per attention for the whole module."""
    if attn not in _RUNS:
        train_llama = _load(TRAIN, "train_llama_under_test")
        out = tmp_path_factory.mktemp("train_llama") / "result.json"
        argv = ["--tiny", "--device", "cpu", "--steps", "2", "--seq", "64", "--tokens-per-step",
                "128", "--kv-heads", "2", "--attn", attn, "--no-progress", "--json", str(out)]
        assert train_llama.main(argv) == 0
        _RUNS[attn] = json.loads(out.read_text())["results"]
    return _RUNS[attn]


def test_train_llama_help_runs_without_transformers():
    out = subprocess.run([sys.executable, TRAIN, "--help"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
    assert out.returncode == 0, out.stdout
    for flag in ("--attn", "--dtype", "--checkpoint", "--tokens-per-step", "--kv-heads", "--tiny"):
        assert flag in out.stdout


@pytest.mark.parametrize("attn", ["eager", "sdpa", "flashtrain"])
def test_train_llama_two_steps(tmp_path_factory, attn):
    _skip_unless_available(attn)
    (result,) = _train(tmp_path_factory, attn)
    assert result["status"] == "ok", result.get("error")
    assert len(result["steps"]) == 2 and result["nonfinite_steps"] == 0
    first = result["steps"][0]["loss"]
    assert isinstance(first, float) and abs(first - math.log(TINY_VOCAB)) < 0.5, first
    assert result["tokens_per_step"] == 128 and result["tokens_per_s"] > 0
    assert result["flops_per_token"] > 6 * result["matmul_parameters"]


def test_flashtrain_loss_matches_sdpa(tmp_path_factory):
    """Same initialisation and data: the losses agree (bf16 autocast rounding)."""
    _skip_unless_available("sdpa")
    _skip_unless_available("flashtrain")
    (sdpa,) = _train(tmp_path_factory, "sdpa")
    (ft,) = _train(tmp_path_factory, "flashtrain")
    for a, b in zip(sdpa["steps"], ft["steps"]):
        assert abs(a["loss"] - b["loss"]) < 0.02, (a, b)


def _report_only(out_dir):
    """run_e2e.py --report-only over out_dir's JSON; returns the RESULTS.md it writes."""
    out = subprocess.run([sys.executable, RUNNER, "--report-only", "--out-dir", str(out_dir)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout
    return (out_dir / "RESULTS.md").read_text()


def test_runner_report_from_json(tmp_path):
    """run_e2e.py --report-only turns result JSON into the markdown table (no torch in it)."""
    ok = lambda attn, seq, tps, mem: {"attn": attn, "dtype": "bf16", "checkpoint": "none", "seq": seq,
                                       "status": "ok", "tokens_per_s": tps, "mfu": 0.4,
                                       "peak_mem_gib": mem, "steps": [{"loss": 10.0}],
                                       "nonfinite_steps": 0}
    results = [ok("sdpa", 2048, 80000.0, 30.0), ok("flashtrain", 2048, 88000.0, 27.0),
               {"attn": "eager", "dtype": "bf16", "checkpoint": "none", "seq": 2048, "status": "oom",
                "steps": []}]
    (tmp_path / "sweep.json").write_text(json.dumps({"settings": {}, "results": results}))
    table = _report_only(tmp_path)
    assert "| 2k | OOM | 80.0k (40%) | 88.0k (40%) |" in table, table
    assert "1.10x" in table and "0.90x" in table, table


def test_train_llama_compare(tmp_path):
    """--compare: one model, rounds of one step per attention; per-attention results and the
    paired ratio over the measured rounds."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    _skip_unless_available("sdpa")
    if not hasattr(transformers, "AttentionInterface"):
        pytest.skip("--compare needs transformers >= 4.48; this is %s" % transformers.__version__)
    train_llama = _load(TRAIN, "train_llama_under_test")
    out = tmp_path / "compare.json"
    argv = ["--tiny", "--device", "cpu", "--compare", "sdpa,eager", "--steps", "3", "--warmup-steps",
            "1", "--seq", "64", "--tokens-per-step", "128", "--json", str(out)]
    assert train_llama.main(argv) == 0
    (result,) = json.loads(out.read_text())["results"]
    assert result["status"] == "ok" and result["compare"] == ["sdpa", "eager"]
    assert "sdpa_backend" in result
    for attn in ("sdpa", "eager"):
        run = result["impls"][attn]
        assert run["status"] == "ok", run.get("error")
        assert [s["step"] for s in run["steps"]] == [0, 1, 2] and run["measured_steps"] == 2
        assert run["tokens_per_s"] > 0 and run["nonfinite_steps"] == 0
    paired = result["paired"]["eager"]
    assert paired["vs"] == "sdpa" and paired["rounds"] == 2 and len(paired["per_round"]) == 2
    assert paired["ratio_min"] <= paired["ratio"] <= paired["ratio_max"]
    assert "ratio_ci95" not in paired  # 2 rounds: too few for a 95% interval of the median


def test_median_interval_is_the_sign_test_interval():
    """The 95% interval of the median from order statistics: ranks 4 and 13 of 16 (the sign test's
    table), 17 and 32 of 48, none below 6 values; its coverage checked by simulation."""
    import random
    train_llama = _load(TRAIN, "train_llama_under_test")
    assert train_llama.median_interval(list(range(16, 0, -1))) == (4, 13)
    assert train_llama.median_interval(list(range(1, 49))) == (17, 32)
    assert train_llama.median_interval([1, 2, 3, 4, 5]) is None
    assert train_llama.median_interval([1, 2, 3, 4, 5, 6]) == (1, 6)
    rng = random.Random(7)
    covered = 0
    for _ in range(2000):
        lo, hi = train_llama.median_interval([rng.expovariate(1.0) for _ in range(16)])
        covered += lo <= 0.6931471805599453 <= hi  # the median of Exp(1) is ln 2
    assert 0.94 <= covered / 2000 <= 0.99, covered


def test_runner_paired_report_from_json(tmp_path):
    """run_e2e.py --report-only writes the paired section from paired.json (no torch in it)."""
    ok = lambda tps, mem: {"status": "ok", "tokens_per_s": tps, "mfu": 0.4, "peak_mem_gib": mem, "steps": []}
    record = lambda seq, sdpa, paired: {
        "attn": "sdpa,flashtrain", "compare": ["sdpa", "flashtrain"], "dtype": "bf16", "seq": seq,
        "status": "ok", "sdpa_backend": "FLASH_ATTENTION",
        "impls": {"sdpa": sdpa, "flashtrain": ok(62400.0, 33.0)}, "paired": {"flashtrain": paired}}
    results = [record(4096, ok(60000.0, 34.2), {"vs": "sdpa", "rounds": 12, "ratio": 1.04,
                                                "ratio_min": 0.99, "ratio_max": 1.08,
                                                "ratio_ci95": [1.01, 1.06]}),
               record(65536, {"status": "oom", "steps": []}, {"vs": "sdpa", "rounds": 0, "per_round": []})]
    (tmp_path / "paired.json").write_text(json.dumps({"settings": {"rounds": 14, "warmup_rounds": 2},
                                                      "results": results}))
    table = _report_only(tmp_path)
    assert "## Paired speed (same process, ABBA)" in table, table
    assert "| 4k | bf16 | 60.0k (40%) | 62.4k (40%) | 1.040x (95% 1.010-1.060) [0.990, 1.080] (12) | 34.2 | 33.0 | " \
           "FLASH_ATTENTION |" in table, table
    assert "| 64k | bf16 | OOM | 62.4k (40%) | - | OOM | 33.0 | FLASH_ATTENTION |" in table, table


def test_runner_dry_run_plans_paired(tmp_path):
    out = subprocess.run([sys.executable, RUNNER, "--mode", "all", "--dry-run", "--out-dir", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout
    assert "plan: one process: --compare sdpa,flashtrain --dtype bf16" in out.stdout, out.stdout
