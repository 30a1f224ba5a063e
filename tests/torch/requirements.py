"""What the Fashion-MNIST checks need beyond pstwin: torch in this interpreter and the data set."""
import os
import sys


def missing_requirement():
    """Why the checks cannot run here ("skipped: ..." material), or None."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return f"{sys.executable} has no torch (Debian: apt-get install python3-torch)"
    data = os.environ.get("PSTWIN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
    if not os.path.exists(os.path.join(data, "train-images-idx3-ubyte.gz")):
        return f"no Fashion-MNIST in {data} (Debian: apt-get install dataset-fashion-mnist)"
    return None
