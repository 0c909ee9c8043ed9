"""CUDA-event timing shared by the benchmarks: callables timed in alternation, rep by rep, so that
the GPU's clock drift falls on all of them alike (bench_attention.py's backends, guard_cost.py's
and ab_builds.py's two builds)."""


def time_ms(fn):
    """One call of fn between its own CUDA events, in ms."""
    import torch  # here, so that the module loads without torch (tests pass their own timer)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def interleaved_medians(fns, reps, warmup=3, timer=time_ms):
    """Median ms of each of fns (name -> callable), timed in alternation: rep r runs every callable
    once, starting from the r-th (so no callable always follows the same one; for two, the order is
    A B, B A, A B, ...). Timing them one after the other instead lets the GPU's clocks drift between
    them by a few percent, as much as the differences being measured. The warm-up calls keep
    first-call costs (workspace, occupancy queries) out of the timing."""
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times = {name: [] for name in names}
    for r in range(reps):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            times[name].append(timer(fns[name]))
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}
