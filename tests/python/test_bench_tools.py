"""The GPU-run tools' pure-Python parts, on CPU: bench/ncu_summary.py's parse of ncu's raw page
and table, bench/ncu_stalls.py's read of the per-instruction table, its mbarrier waits and its
source lines from an nvdisasm listing, bench/plot_bench.py's
sequence-length labels and per-backend colors, bench/bwd_trace.py's read of the backward's
per-block timeline, bench/timing.py's alternation of what the benchmarks time,
bench/ab_builds.py's per-side environment and its comparison of the two builds' outputs, the
operator namespace that lets one of its builds be profiled alone, bench/ab_summary.py's ranges by
group, bench/sass_order.py's read of a cuobjdump listing, bench/sass_spills.py's split of a
kernel's spills between its consumers and the rest, and scripts/gpu_ab.sh's run of what
scripts/prebuild.sh built."""
import importlib.util
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_main(module, *args):
    """module.main() with sys.argv set to the script and args (restored after)."""
    argv, sys.argv = sys.argv, [module.__name__ + ".py", *args]
    try:
        return module.main()
    finally:
        sys.argv = argv


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "bench", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A few lines in the shape `ncu --page raw --print-units base` prints them.
RAW = """  bwd_kernel_sm90<BwdTraits<128, bfloat16_t>>(BwdKernelParams<T1>) (132, 1, 1)x(256, 1, 1)
    Section: Command line profiler metrics
    gpu__time_duration.sum                                   ns       7,094,656
    launch__registers_per_thread                 register/thread            254
    sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed  %   39.57
    dram__bytes_read.sum                                   byte     459,052,288
    dram__bytes_write.sum                                  byte     284,461,312
    lts__t_sector_hit_rate.pct                                %           97.37
    smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio        1.99
    smsp__average_warps_issue_stalled_selected_per_issue_active.ratio       1.00
    smsp__average_warps_issue_stalled_wait_per_issue_active.ratio           1.71
    smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio           0.78
    smsp__average_warp_latency_per_inst_issued.ratio         cycle           7.50
"""


def test_ncu_summary_reads_raw_page(tmp_path):
    ncu_summary = load("ncu_summary")
    (tmp_path / "bwd_s8192_d128.raw.txt").write_text(RAW)
    m = ncu_summary.read_raw(str(tmp_path / "bwd_s8192_d128.raw.txt"))
    assert m["gpu__time_duration.sum"] == 7094656.0
    assert m["launch__registers_per_thread"] == 254.0
    row = ncu_summary.row("bwd_s8192_d128", m)
    assert row[:4] == ["bwd_s8192_d128", "7095", "254", "39.6"]
    assert row[4] == "-"  # shared-memory pipe metric absent
    assert row[5] == "0.46 / 0.28"
    assert row[8] == "7.50"
    # Largest stalls first, "selected" (issuing) left out.
    assert row[9] == "barrier 1.99, wait 1.71, gmma 0.78"


def test_ncu_summary_writes_table(tmp_path, capsys):
    ncu_summary = load("ncu_summary")
    (tmp_path / "a.raw.txt").write_text(RAW)
    out = tmp_path / "summary.md"
    assert run_main(ncu_summary, str(tmp_path), "--markdown", str(out)) == 0
    lines = out.read_text().splitlines()
    assert lines[0].startswith("| kernel, shape | us | regs |")
    assert lines[2].startswith("| a | 7095 | 254 |")
    assert capsys.readouterr().out.splitlines()[2] == lines[2]


# The per-instruction table in the shape `ncu --page source --print-source sass --csv` writes it
# (two header rows, then one row per instruction; only the columns ncu_stalls.py reads).
SASS_CSV = """"Kernel Name","bwd_kernel_sm90"
"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","stall_long_sb","stall_barrier (Not Issued)","Instructions Executed"
"0x10","      HGMMA.64x64x16.F32.BF16 R184, gdesc[UR16], RZ, !UPT","50","0","0","0","64"
"0x20","      BAR.SYNC.DEFER_BLOCKING 0x0","30","27","0","27","8"
"0x30","      FENCE.VIEW.ASYNC.S","20","0","20","0","8"
"""


def test_ncu_stalls_ranks_and_totals(tmp_path, capsys):
    ncu_stalls = load("ncu_stalls")
    (tmp_path / "k.sass.csv").write_text(SASS_CSV)
    run_main(ncu_stalls, str(tmp_path / "k.sass.csv"), "--top", "2", "--regions", "sync:1-2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# 100 stall samples")
    # The wgmma's samples have no reason in the table; the barrier's are 90% barrier.
    assert lines[1].split()[:3] == ["0", "50.0%", "unattributed"]
    assert lines[2].split()[:4] == ["1", "30.0%", "barrier", "90%,"]
    assert len(lines) == 5 and lines[4].split() == ["sync", "1-2", "50.0%"]


# The same table with the shared-memory wavefront columns: a wgmma reading A from shared memory,
# one from registers, and a 64-bit store at twice its ideal (a 2-way bank conflict).
SASS_CSV_SHARED = """"Kernel Name","bwd_kernel_sm90"
"Address","Source","Warp Stall Sampling (All Samples)","stall_barrier","Instructions Executed","L1 Wavefronts Shared","L1 Wavefronts Shared Ideal"
"0x10","      HGMMA.64x128x16.F32.BF16 R88, gdesc[UR16], RZ, !UPT","10","0","100","1,200","1,200"
"0x20","      HGMMA.64x64x16.F32.BF16 R152, R88, gdesc[UR16].tnspB, R152","10","0","100","400","400"
"0x30","  @P0 STS.64 [R3+0x100], R4","5","0","100","400","200"
"0x40","      FADD R1, R2, R3","5","0","100","0","0"
"""


def test_ncu_stalls_shared_wavefronts_by_form(tmp_path, capsys):
    ncu_stalls = load("ncu_stalls")
    (tmp_path / "k.sass.csv").write_text(SASS_CSV_SHARED)
    run_main(ncu_stalls, str(tmp_path / "k.sass.csv"), "--top", "0", "--shared", "5")
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# shared-memory wavefronts 2000 (ideal 1800)"))
    rows = [line.split() for line in lines[start + 1:]]
    # Largest first; wgmma told apart by its A operand; the store's excess is its 200 over the ideal.
    assert rows == [["HGMMA.64x128x16.F32.BF16", "A=smem", "60.0%", "1200", "12.00", "+0"],
                    ["HGMMA.64x64x16.F32.BF16", "A=reg", "20.0%", "400", "4.00", "+0"],
                    ["STS.64", "20.0%", "400", "4.00", "+200"]]


# An nvdisasm -gi listing of two functions; the second is SASS_CSV's kernel, its first
# instruction inlined from a helper, the third without line comments of its own.
LISTING = """.text._Z5otherv:
	//## File "/x/other.cu", line 3
        /*0000*/                   EXIT ;
.text._Z15bwd_kernel_sm90ILb0EEvv:
	//## File "/x/wgmma.h", line 20 inlined at "/x/kernel.h", line 251
	//## File "/x/kernel.h", line 251
        /*0000*/                   HGMMA.64x64x16.F32.BF16 R184, gdesc[UR16], RZ, !UPT ;
	//## File "/x/kernel.h", line 260
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0020*/                   FENCE.VIEW.ASYNC.S ;
"""


def test_ncu_stalls_source_lines(tmp_path, capsys):
    """--source / --function: each instruction's call chain from the listing's line comments, and
    the samples totalled by the kernel's own line; a listing of another build is refused."""
    ncu_stalls = load("ncu_stalls")
    (tmp_path / "k.sass.csv").write_text(SASS_CSV)
    (tmp_path / "k.dis").write_text(LISTING)
    run_main(ncu_stalls, str(tmp_path / "k.sass.csv"), "--top", "3", "--source", str(tmp_path / "k.dis"),
             "--function", "bwd_kernel_sm90,Lb0E", "--by-line", "2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].endswith("<- wgmma.h:20 < kernel.h:251"), lines[1]
    assert lines[2].endswith("<- kernel.h:260") and lines[3].endswith("<- kernel.h:260"), lines
    assert sorted(l.split() for l in lines[5:7]) == [["kernel.h:251", "50.0%"], ["kernel.h:260", "50.0%"]], lines
    with pytest.raises(SystemExit):
        run_main(ncu_stalls, str(tmp_path / "k.sass.csv"), "--source", str(tmp_path / "k.dis"), "--function", "other")


def test_ncu_stalls_totals_mbarrier_waits_by_name(tmp_path, capsys):
    # Two waits on the array qdo_full (base 0x38950, the index in a register), their retry
    # branches, one on an offset the JSON does not know, and a wait on kv_full.
    table = SASS_CSV.splitlines()[:2] + [
        '"0x10","      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R13+URZ+0x38950], R10","5","0","5","0","8"',
        '"0x20","      @!P0  BRA 0x7fa2757cfef0","40","0","40","0","8"',
        '"0x30","      FFMA R13, R184, UR11, -R16","10","0","0","0","8"',
        '"0x40","      SYNCS.PHASECHK.TRANS64.TRYWAIT P2, [R2+URZ+0x38948], R3","1","0","1","0","8"',
        '"0x50","      @!P2  NANOSLEEP.SYNCS 0x989680","0","0","0","0","8"',
        '"0x60","      @!P2  SYNCS.PHASECHK.TRANS64 P2, [R2+URZ+0x38948], R3","4","0","4","0","8"',
        '"0x70","      @!P2  BRA 0x7fa2757cfe50","20","0","20","0","8"',
        '"0x80","      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR29+0x38960], R10","20","0","20","0","8"',
    ]
    (tmp_path / "k.sass.csv").write_text("\n".join(table) + "\n")
    (tmp_path / "b.json").write_text('{"k": {"kv_full": 231752, "qdo_full[0]": 231760, "qdo_full[1]": 231768}}')
    ncu_stalls = load("ncu_stalls")
    run_main(ncu_stalls, str(tmp_path / "k.sass.csv"), "--top", "0", "--barriers",
             str(tmp_path / "b.json"), "--kernel", "k")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# 100 stall samples")
    assert lines[2:] == ["qdo_full                          45.0%",
                         "kv_full                           25.0%",
                         "? offset 0x38960                  20.0%"]


def test_ncu_stalls_opcodes_versus(tmp_path, capsys):
    ncu_stalls = load("ncu_stalls")
    (tmp_path / "a.sass.csv").write_text(SASS_CSV)
    # The other variant: one more predicated HGMMA line, no fence.
    other = SASS_CSV.replace('"0x30","      FENCE.VIEW.ASYNC.S","20","0","20","0","8"',
                             '"0x30","      @!P0 HGMMA.64x64x16.F32.BF16 R0, gdesc[UR4], RZ","5","0","0","0","16"')
    (tmp_path / "b.sass.csv").write_text(other)
    run_main(ncu_stalls, str(tmp_path / "a.sass.csv"), "--top", "0", "--opcodes", "3", "--versus",
             str(tmp_path / "b.sass.csv"))
    lines = capsys.readouterr().out.splitlines()
    assert "(all: 80 - 88 = -8)" in lines[1]
    assert lines[2].split() == ["HGMMA", "64", "50", "80", "55", "-16", "-5"]
    assert lines[3].split()[:3] in (["BAR", "8", "30"], ["FENCE", "8", "20"])
    assert len(lines) == 5


def test_plot_labels():
    plot_bench = load("plot_bench")
    assert [plot_bench.seq_label(s) for s in (512, 1024, 16384, 1536, 1000)] == ["0.5k", "1k", "16k", "1.5k", "1000"]


def test_plot_colors_follow_the_backend_not_the_order():
    """A group without flashtrain (a head dim not built) keeps FA2 and cuDNN in their own colors
    and names what is missing; before, FA2 took flashtrain's color there."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_bench = load("plot_bench")
    times = {"fwd_tflops": 1.0, "bwd_tflops": 2.0, "fwdbwd_tflops": 3.0}
    results = []
    for dim, ours in ((64, dict(times)), (256, {"error": "head dim 256 is not built"})):
        for seqlen in (1024, 2048):
            results.append({"dtype": "bf16", "dim": dim, "causal": False, "seqlen": seqlen,
                            "flashtrain": ours, "flash": dict(times), "cudnn": dict(times)})
    fig = plot_bench.draw({"results": results, "meta": {}}, plt)
    axes = fig.axes
    full, partial = axes[0], axes[len(plot_bench.PASSES)]  # the first panel of each group
    colors = {line.get_label(): line.get_color() for line in full.get_lines()}
    assert colors == {"flashtrain": "C0", "SDPA flash (FA2)": "C1", "SDPA cuDNN": "C2"}
    assert {line.get_label(): line.get_color() for line in partial.get_lines()} == {
        "SDPA flash (FA2)": "C1", "SDPA cuDNN": "C2"}
    assert any("no data: flashtrain" in t.get_text() for t in partial.texts)
    plt.close(fig)


def test_bwd_trace_phases_and_gaps(tmp_path):
    """Two SMs, two blocks each, at 2 cycles per ns: the phases come back in microseconds, the
    second warpgroup's later end and the gap to the SM's next block are measured from the end of
    the block's last warpgroup, and a block without steps counts for the gaps only."""
    import struct
    bwd_trace = load("bwd_trace")
    ghz = 2.0
    phases_ns = [[0, 1000, 2000, 42000, 44000, 46000], [0, 1000, 3000, 43000, 45000, 47000]]
    records = []
    for block in range(4):
        sm, order = block % 2, block // 2
        g0 = 1_000_000 + order * 50_000  # the block after starts 3 us after warpgroup 1's end
        c0 = 10_000_000 + block * 777
        rec = [0] * 16
        rec[0], rec[1], rec[2], rec[3] = g0, g0 + phases_ns[0][5], sm, 20 if block != 3 else 0
        for w in range(2):
            for ph in range(6):
                rec[4 + 6 * w + ph] = int(c0 + ghz * phases_ns[w][ph])
        records.append(rec)
    path = tmp_path / "trace.bin"
    with open(path, "wb") as f:
        f.write(struct.pack("<8q", 4, 128, 64, 128, 1980000, 0, 0, 0))
        for rec in records:
            f.write(struct.pack("<16Q", *rec))
    meta, recs = bwd_trace.read(str(path))
    assert meta["blocks"] == 4 and meta["head_dim"] == 128 and len(recs) == 4
    out = bwd_trace.summarise(meta, recs)
    assert out["blocks_traced"] == 4 and out["blocks_with_steps"] == 3 and out["sms"] == 2
    assert abs(out["median_ghz"] - ghz) < 1e-6
    ph = out["phases"]
    assert abs(ph["kv_wg0"]["median_us"] - 1.0) < 1e-6
    assert abs(ph["prologue_wg1"]["median_us"] - 2.0) < 1e-6
    assert abs(ph["steps_wg0"]["median_us"] - 40.0) < 1e-6
    assert abs(ph["epilogue_wg1"]["median_us"] - 2.0) < 1e-6
    assert abs(ph["wg1_after_wg0"]["median_us"] - 1.0) < 1e-6
    assert abs(ph["gap"]["median_us"] - 3.0) < 1e-6
    assert abs(out["median_step_us"] - 2.0) < 1e-6


def test_timing_alternates_callables():
    bench = load("timing")
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    # A fake clock: each call of b "takes" 2 ms, of a 1, of c 3, except one slow outlier of c.
    costs = {"a": [1.0] * 5, "b": [2.0] * 5, "c": [3.0, 3.0, 90.0, 3.0, 3.0]}
    def timer(fn):
        fn()
        name = calls[-1]
        return costs[name].pop(0)
    medians = bench.interleaved_medians(fns, reps=5, warmup=2, timer=timer)
    assert medians == {"a": 1.0, "b": 2.0, "c": 3.0}
    # warm-up: each twice in turn; then rep r starts at the r-th callable and runs all three
    assert calls[:6] == ["a", "a", "b", "b", "c", "c"]
    timed = calls[6:]
    assert [timed[3 * r:3 * r + 3] for r in range(5)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"], ["b", "c", "a"]]


def test_ab_builds_env_per_side(monkeypatch):
    sys.path.insert(0, os.path.join(REPO, "bench"))
    try:
        ab = load("ab_builds")
    finally:
        sys.path.pop(0)
    assert ab.parse_env("") == {}
    assert ab.parse_env("A=1,B=x=y") == {"A": "1", "B": "x=y"}
    try:
        ab.parse_env("A")
        raise AssertionError("parse_env accepted 'A'")
    except SystemExit as e:
        assert "NAME=VALUE" in str(e)

    class Ops:
        def fwd(self, *args):
            return os.environ["FT_AB_TEST"], args
    monkeypatch.setenv("FT_AB_TEST", "unset")
    a, b = ab.EnvOps(Ops(), {"FT_AB_TEST": "128"}), ab.EnvOps(Ops(), {"FT_AB_TEST": "long"})
    assert a.fwd(1, 2) == ("128", (1, 2))
    assert b.fwd() == ("long", ())
    assert a.fwd()[0] == "128"


def test_ab_builds_output_diffs():
    import torch
    sys.path.insert(0, os.path.join(REPO, "bench"))
    try:
        ab = load("ab_builds")
    finally:
        sys.path.pop(0)
    a = torch.tensor([[1.0, -4.0], [2.0, 0.5]])
    assert ab.relative_diff(a, a.clone()) == 0.0
    assert ab.relative_diff(a, a + torch.tensor([[0.0, 0.0], [0.0, 0.25]])) == 0.25 / 4.0
    assert ab.relative_diff(torch.zeros(3), torch.tensor([0.0, 0.5, 0.0])) == 0.5
    assert ab.relative_diff(a, torch.full_like(a, float("nan"))) == float("inf")

    class Ops:
        """fwd / bwd with the operators' return shapes; `shift` moves dk only."""

        def __init__(self, shift):
            self.shift = shift

        def fwd(self, q, k, v, *rest):
            return q + v, q.sum(-1)

        def bwd(self, dout, q, k, v, *rest):
            return dout * 2.0, k + self.shift, v * 3.0

    q, k, v, dout = (torch.arange(8.0).reshape(2, 4) + i for i in range(4))
    diffs = ab.output_diffs(Ops(0.0), Ops(1.0), q, k, v, dout, causal=False, deterministic=False)
    assert list(diffs) == ["out", "dq", "dk", "dv"]
    assert diffs["out"] == diffs["dq"] == diffs["dv"] == 0.0
    assert diffs["dk"] == 1.0 / float(k.abs().max())
    assert ab.format_diffs({"out": 0.0, "dq": 2.1e-4}) == "out 0 / dq 2.1e-04"


def test_operator_namespace_from_the_environment(monkeypatch):
    # scripts/gpu_ab.sh profiles build B alone by loading it under its own torch.ops namespace.
    import torch
    from flashtrain import _load, ops
    monkeypatch.delenv(_load.NAMESPACE_ENV, raising=False)
    assert _load.namespace() == "flashtrain"
    assert ops._ops is torch.ops.flashtrain
    monkeypatch.setenv(_load.NAMESPACE_ENV, "flashtrain_b")
    assert _load.namespace() == "flashtrain_b"
    monkeypatch.setenv(_load.NAMESPACE_ENV, "")
    assert _load.namespace() == "flashtrain"


# Two functions in the shape `cuobjdump -sass` prints them (addresses in bytes, 16 an instruction).
SASS_LISTING = """
\t\tFunction : _ZN10flashtrain4cuda4sm9015fwd_kernel_sm90Ev
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0040*/                   FMNMX R0, R25, R24, !PT ;
        /*0050*/                   MUFU.EX2 R24, R24 ;
        /*0060*/                   MUFU.EX2 R25, R25 ;
        /*0070*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0080*/                   F2FP.BF16.F32.PACK_AB R30, R25, R24 ;
        /*0090*/               @!P0 BRA 0x10 ;
\t\tFunction : _ZN10flashtrain4cuda4sm8010fwd_kernelEv
        /*0000*/                   MUFU.EX2 R2, R2 ;
"""


def test_sass_order_collapses_runs_in_address_order(tmp_path, capsys):
    sass_order = load("sass_order")
    (tmp_path / "k.sass").write_text(SASS_LISTING)
    run_main(sass_order, str(tmp_path / "k.sass"))
    lines = capsys.readouterr().out.splitlines()
    # Only the sm90 kernel (the default --kernel); the waits carry their group count.
    assert lines == ["== _ZN10flashtrain4cuda4sm9015fwd_kernel_sm90Ev",
                     "  1:HGMMAx2 3:WAIT<1>x1 4:FMNMXx1 5:MUFUx2 7:WAIT<0>x1 8:F2FPx1 9:BRAx1"]
    assert sass_order.classify("@P1 BAR.ARV R2, 0x100") == "BAR.ARV"
    assert sass_order.classify("IMAD R2, R3, R4, RZ") is None


# Consumers first (registers raised), then the producer after its DEALLOC, as ptxas lays out the
# sm90 kernels; a second function with no local memory.
SPILL_LISTING = """
\t\tFunction : _ZN10flashtrain4cuda4sm9015bwd_kernel_sm90Ev
        /*0000*/                   STL [R1], R2 ;
        /*0010*/                   USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xf0 ;
        /*0020*/                   STL [R1+0x8], R2 ;
        /*0030*/                   LDL.LU R2, [R1+0x8] ;
        /*0040*/                   EXIT ;
        /*0050*/                   USETMAXREG.DEALLOC.CTAPOOL 0x18 ;
        /*0060*/                   STL [R1+0x4], R5 ;
        /*0070*/               @P0 LDL R8, [R1+0x4] ;
        /*0080*/                   LDL R4, [R1] ;
\t\tFunction : _ZN10flashtrain4cuda4sm8010fwd_kernelEv
        /*0000*/                   MUFU.EX2 R2, R2 ;
"""


def test_sass_spills_splits_consumers_from_the_rest(tmp_path, capsys):
    sys.path.insert(0, os.path.join(REPO, "bench"))  # it reads the listing with sass_order's parser
    try:
        sass_spills = load("sass_spills")
    finally:
        sys.path.pop(0)
    (tmp_path / "k.sass").write_text(SPILL_LISTING)
    run_main(sass_spills, str(tmp_path / "k.sass"))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines  # the function without local memory is not listed
    assert lines[0].endswith("raised-register warps 1 STL / 1 LDL, other warps 2 STL / 2 LDL"), lines[0]
    # Without a register split every local-memory instruction counts as the rest's.
    body = [(0, "STL [R1], R2"), (16, "LDL R3, [R1]")]
    assert sass_spills.split_spills(body) == [0, 0, 1, 1]


def test_ab_summary_groups_rows(tmp_path, capsys):
    import json
    case = dict(dtype="bf16", seqlen=2048, a_ms=2.0, b_ms=1.0, a_tflops=1.0, b_tflops=2.0, diffs={})
    cases = [
        {**case, "dim": 256, "causal": True, "deterministic": False, "a_fwd_ms": 1.0, "b_fwd_ms": 0.5, "bwd_ratio": 1.10},
        {**case, "dim": 256, "causal": True, "deterministic": False, "seqlen": 8192, "a_fwd_ms": 1.0, "b_fwd_ms": 1.0,
         "bwd_ratio": 0.90},
        {**case, "dim": 64, "causal": False, "deterministic": True, "a_fwd_ms": 1.0, "b_fwd_ms": 2.0, "bwd_ratio": 1.0},
    ]
    path = tmp_path / "ab.json"
    path.write_text(json.dumps({"meta": {}, "cases": cases}))
    run_main(load("ab_summary"), str(path))
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| 64 | no mask | deterministic | 0.500-0.500 | 1.000-1.000 | 1 |"
    assert lines[3] == "| 256 | causal | default | 1.000-2.000 | 0.900-1.100 | 2 |"


def test_gpu_ab_runs_a_prebuilt_folder(tmp_path):
    # scripts/prebuild.sh's output (xz files under a/) unpacked by scripts/gpu_ab.sh --prebuilt into
    # a build folder's layout, the test binary run from there; without b/, no A/B timing.
    import lzma
    import shutil
    import subprocess
    pre = tmp_path / "pre" / "a"
    pre.mkdir(parents=True)
    lib = os.urandom(4096)
    (pre / "libflashtrain_torch.so.xz").write_bytes(lzma.compress(lib))
    (pre / "flashtrain_tests.xz").write_bytes(lzma.compress(b"#!/bin/sh\necho \"[  PASSED  ] 3 tests ($1)\"\n"))
    (pre / "build.txt").write_text("commit abc\nhdims 64\n")
    out = tmp_path / "out"
    try:
        r = subprocess.run(["bash", os.path.join(REPO, "scripts", "gpu_ab.sh"), str(out), "--prebuilt",
                            str(tmp_path / "pre"), "--tests", "*Some*", "--race", ""],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        summary = (out / "summary.txt").read_text()
        assert "prebuilt A (unpacked: exit 0): commit abc hdims 64" in summary
        assert "tests on B (*Some*): exit 0 ([  PASSED  ] 3 tests (--gtest_filter=*Some*) )" in summary
        assert "ab_builds" not in summary
        unpacked = os.path.join(REPO, "build-ab-pre-a", "python", "flashtrain", "libflashtrain_torch.so")
        with open(unpacked, "rb") as f:
            assert f.read() == lib
    finally:
        shutil.rmtree(os.path.join(REPO, "build-ab-pre-a"), ignore_errors=True)


def test_prebuild_takes_a_only_from_a_prebuild_of_these_sources(tmp_path):
    # scripts/prebuild.sh --a-from: refused (exit 2, before anything is built) without --patch, without
    # a prebuilt A there, or with an A of other sources or head dims.
    import subprocess
    script = os.path.join(REPO, "scripts", "prebuild.sh")

    def run(*args):
        return subprocess.run(["bash", script, str(tmp_path / "out"), *args], capture_output=True, text=True,
                              timeout=60)

    a = tmp_path / "pre" / "a"
    a.mkdir(parents=True)
    r = run("--a-from", str(tmp_path / "pre"))
    assert r.returncode == 2 and "--a-from needs --patch" in r.stderr
    r = run("--a-from", str(tmp_path / "pre"), "--patch", "x.patch")
    assert r.returncode == 2 and "no prebuilt A" in r.stderr
    (a / "libflashtrain_torch.so.xz").write_bytes(b"")
    for info in ("commit 0123456789012345678901234567890123456789\npatches none\nhdims 64;128;256; tests OFF\n",
                 "commit abc plus uncommitted changes\npatches none\nhdims 64;128;256; tests OFF\n"):
        (a / "build.txt").write_text(info)
        r = run("--a-from", str(tmp_path / "pre"), "--patch", "x.patch")
        assert r.returncode == 2 and "is not an A of HEAD's sources" in r.stderr
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head:  # a clone: HEAD's own A, but of other head dims
        (a / "build.txt").write_text(f"commit {head}\npatches none\nhdims 64;128; tests OFF\n")
        r = run("--a-from", str(tmp_path / "pre"), "--patch", "x.patch")
        assert r.returncode == 2 and "is not an A of HEAD's sources" in r.stderr
