import pytest


def _sm90_gpu() -> bool:
    from gemmtrace.runner import gpu_available

    if not gpu_available():
        return False
    import torch

    return torch.cuda.get_device_capability() == (9, 0)


HAVE_SM90 = _sm90_gpu()


def pytest_collection_modifyitems(config, items):
    if HAVE_SM90:
        return
    skip = pytest.mark.skip(reason="needs an sm_90a GPU with torch (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
