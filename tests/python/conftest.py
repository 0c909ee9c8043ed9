"""Shared fixtures: the devices present (CPU always, CUDA when torch sees a GPU) and a fixed seed
per test so failures reproduce."""
import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(20261202)
