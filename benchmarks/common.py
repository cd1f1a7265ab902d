"""Shared benchmark helpers: machine description and interleaved timing."""

import os
import platform
import statistics
import time
from pathlib import Path
from typing import Optional

import torch


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({cpu}), torch {torch.__version__}, {torch.get_num_threads()} torch threads"


def device_description(device: torch.device) -> str:
    """The GPU's name for a CUDA device, else the CPU description."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else machine_description()


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so a wall-clock timer measures it (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(candidates: dict, rounds: int) -> dict:
    """Warm each candidate up once, then run each ``rounds`` times, alternating; ``{name: [seconds, ...]}``.

    Alternating A, B, A, B ... exposes both sides to the same background load, so their ratio stays meaningful on
    a busy machine even when absolute times drift.
    """
    timings = {name: [] for name in candidates}
    for run in candidates.values():  # untimed warm-up: first-call allocations and thread-pool start-up
        run()
    for _ in range(rounds):
        for name, run in candidates.items():
            timings[name].append(run())
    return timings


def median(values) -> float:
    return statistics.median(values)


class Stopwatch:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def emit(table: str, output: Optional[str] = None) -> None:
    """Print a result table and, when ``output`` is given, write it there too."""
    print(table)
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(table + "\n")
