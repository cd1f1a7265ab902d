"""Shared benchmark helpers: machine description, interleaved timing with its spread, FLOP counting and peaks."""

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Optional

import torch
from transformers import TrainerCallback

# Dense bf16 tensor-core peaks from NVIDIA's datasheets (TFLOP/s, no sparsity), by a fragment of the device name;
# the first fragment found in the name wins (so "H100 PCIe" before "H100").
DATASHEET_BF16_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM5; torch names it "NVIDIA H100 80GB HBM3"
    ("H200", 989.4),  # also GH200
    ("A100", 312.0),
    ("L40S", 362.1),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
)


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"{os.cpu_count()} cores ({cpu}), torch {torch.__version__}, {torch.get_num_threads()} torch threads{load}"


def command_line(script: str, argv) -> tuple:
    """``(command, shown)``: the command that ran ``benchmarks/<script>`` with ``argv`` (default: this process's),
    and the same with the ``OMP_NUM_THREADS`` it ran under, as a results table's ``Command:`` shows it."""
    import shlex
    import sys

    command = f"python benchmarks/{script} {shlex.join(argv if argv is not None else sys.argv[1:])}"
    threads = os.environ.get("OMP_NUM_THREADS")
    return command, f"{f'OMP_NUM_THREADS={threads} ' if threads else ''}{command}"


def device_description(device: torch.device) -> str:
    """The GPU's name for a CUDA device, else the CPU description."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else machine_description()


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a wall-clock timer measures it (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def set_threads(threads: Optional[int]) -> None:
    """Fix torch's CPU threads (``None``: leave torch's choice, which follows ``OMP_NUM_THREADS``)."""
    if threads:
        torch.set_num_threads(threads)


def timing_parser(description: str) -> argparse.ArgumentParser:
    """A benchmark's argument parser with the options of timed Trainer rounds: ``--steps``, ``--warmup``,
    ``--rounds`` and ``--threads``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="Optimizer steps per round (the first --warmup untimed).")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed steps at the start of every round.")
    parser.add_argument("--rounds", type=int, default=5, help="Alternating rounds per side (at least 5 for a spread).")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: OMP_NUM_THREADS).")
    return parser


def interleaved(candidates: dict, rounds: int, warmup: bool = True) -> dict:
    """Warm each candidate up once (unless ``warmup`` is off), then run each ``rounds`` times, alternating;
    ``{name: [result, ...]}``.

    Alternating A, B, A, B ... exposes both sides to the same background load, so their ratio stays meaningful on
    a busy machine even when absolute times drift. A candidate returns one number per run (or a dict of them).
    """
    timings = {name: [] for name in candidates}
    for run in candidates.values() if warmup else ():  # untimed: first-call allocations, thread-pool start-up
        run()
    for index in range(rounds):
        for name, run in candidates.items():
            timings[name].append(run())
        print(f"round {index + 1}/{rounds}: " + ", ".join(f"{name} {_short(values[-1])}"
                                                         for name, values in timings.items()), flush=True)
    return timings


def _short(result) -> str:
    return " ".join(f"{k} {v:.3g}" for k, v in result.items()) if isinstance(result, dict) else f"{result:.3g}"


def median(values) -> float:
    return statistics.median(values)


def spread(values) -> dict:
    """``{"median", "min", "max", "n"}`` of a list of numbers."""
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def format_spread(values, digits: int = 2, scale: float = 1.0) -> str:
    """``median (min-max)`` of ``values`` (each multiplied by ``scale``)."""
    s = spread(v * scale for v in values)
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


class Stopwatch:
    def __enter__(self):
        self.start = time.perf_counter()
        self.cpu_start = time.process_time()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        self.cpu_seconds = time.process_time() - self.cpu_start


def emit(table: str, output: Optional[str] = None) -> None:
    """Print a result table and, when ``output`` is given, write it there too."""
    print(table)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(table + "\n")


def write_outputs(folder, name: str, record: dict, markdown: str) -> None:
    """``folder/name.json`` and ``folder/name.md``, each written to a temporary sibling first, then ``os.replace``d."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for path, text in ((folder / f"{name}.json", json.dumps(record, indent=2) + "\n"),
                       (folder / f"{name}.md", markdown)):
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)


# ------------------------------------------------------------------------------------------------ FLOPs and peaks
def count_flops(function: Callable[[], object]) -> int:
    """FLOPs of the matmuls and attention ``function`` runs (``torch.utils.flop_counter``, forward and backward)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        function()
    return counter.get_total_flops()


def datasheet_peak_tflops(device: torch.device) -> Optional[float]:
    """The dense bf16 datasheet peak of a known NVIDIA GPU (``None`` for the CPU and unknown GPUs)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for fragment, peak in DATASHEET_BF16_TFLOPS if fragment in name), None)


def matmul_tflops(device: torch.device, dtype: torch.dtype, size: Optional[int] = None, repeats: int = 10,
                  clock: Callable[[], float] = time.perf_counter) -> float:
    """Measured rate of one large square matmul on random data: the ceiling as the installed library reaches it.

    ``clock=time.process_time`` gives the rate per CPU-second of this process (all its threads), which a busy machine
    does not dilute the way it dilutes wall time.
    """
    size = size or (8192 if device.type == "cuda" else 1024)
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=generator)
    for _ in range(3):
        a @ b
    synchronize(device)
    start = clock()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * size**3 * repeats / (clock() - start) / 1e12


# ------------------------------------------------------------------------------------------------ Trainer timing
class TrainerStepTimer(TrainerCallback):
    """Wall and process-CPU time of a ``Trainer.train()`` run from the end of step ``warmup`` to the end of the last.

    The device is synchronised at those two points only, so the steps in between overlap as in a real run.
    ``seconds_per_step`` / ``cpu_seconds_per_step`` are those times over the steps they cover (``None`` until the
    run ends).
    """

    def __init__(self, warmup: int, device: torch.device):
        self.warmup, self.device = warmup, device
        self.start = self.seconds_per_step = self.cpu_seconds_per_step = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.warmup == 0:
            self.on_step_end(args, state, control)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            synchronize(self.device)
            self.start, self.cpu_start = time.perf_counter(), time.process_time()
        elif state.global_step == state.max_steps and self.start is not None:
            synchronize(self.device)
            steps = state.max_steps - self.warmup
            self.seconds_per_step = (time.perf_counter() - self.start) / steps
            self.cpu_seconds_per_step = (time.process_time() - self.cpu_start) / steps
