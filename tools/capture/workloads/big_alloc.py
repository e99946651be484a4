"""One allocation bigger than the machine: numpy's / torch's own out-of-memory errors.

python big_alloc.py numpy   # np.zeros((100000, 100000)) -> _ArrayMemoryError (74.5 GiB)
python big_alloc.py torch   # torch.zeros(100000, 100000) -> DefaultCPUAllocator error
"""

import sys


def main():
    which = sys.argv[1]
    print(f"building a 100000 x 100000 similarity matrix with {which}", flush=True)
    if which == "numpy":
        import numpy as np

        sim = np.zeros((100_000, 100_000))
    else:
        import torch

        sim = torch.zeros(100_000, 100_000)
    print(sim.sum())


if __name__ == "__main__":
    main()
