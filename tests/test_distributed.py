"""Two CPU processes (gloo, via ``accelerate launch``) give the loss and gradients of one process with the
concatenated batch: in-batch negatives are gathered across processes with gradients, labels offset by rank."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

WORKER = Path(__file__).with_name("dist_worker.py")


def launch(num_processes: int, output: Path, *extra: str) -> dict:
    # On a CPU-only host `--multi_gpu` is what makes accelerate start N gloo processes (MULTI_CPU);
    # `--cpu --num_processes 2` silently runs a single process.
    mode = ["--multi_gpu"] if num_processes > 1 else ["--cpu"]
    command = [sys.executable, "-m", "accelerate.commands.launch", *mode, "--num_processes", str(num_processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(WORKER), str(output),
               *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return load_file(output)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return launch(1, tmp_path_factory.mktemp("dist") / "single.safetensors")


def assert_same_step(reference: dict, other: dict) -> None:
    assert other["world_size"].item() == 2 and reference["world_size"].item() == 1
    assert reference.keys() == other.keys()
    torch.testing.assert_close(other["loss"], reference["loss"], rtol=1e-10, atol=0)
    for name in reference.keys() - {"loss", "world_size"}:
        torch.testing.assert_close(other[name], reference[name], rtol=1e-7, atol=1e-14, msg=name)


def test_two_processes_match_one_process_with_concatenated_batch(single, tmp_path):
    assert_same_step(single, launch(2, tmp_path / "two.safetensors"))


def test_without_gathering_two_processes_differ(single, tmp_path):
    # the control: local-only negatives see half the candidates, so the step is different
    local_only = launch(2, tmp_path / "local.safetensors", "--no-gather")
    assert not torch.allclose(local_only["loss"], single["loss"], rtol=1e-3)
