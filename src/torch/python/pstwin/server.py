"""Runs this process's DMLC_ROLE of a pstwin.torch job: a server (sums every worker's push_pull) or
the scheduler, until the job ends. The same as a training script's bps.init() on those roles, for
launchers that start servers with a command of their own (BytePS: python3 -c 'import byteps.server').

Usage: DMLC_ROLE=server DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=1 DMLC_PS_ROOT_URI=... python3 -m pstwin.server
"""
import os
import sys

from pstwin import _core


def main() -> int:
    role = os.environ.get("DMLC_ROLE")
    if role not in ("server", "scheduler"):
        print(f"pstwin.server: DMLC_ROLE={role!r}; fix: set DMLC_ROLE=server or DMLC_ROLE=scheduler "
              "(workers run the training script itself)", file=sys.stderr)
        return 2
    if role == "server":
        _core.run_server()
    else:
        _core.run_scheduler()
    return 0


if __name__ == "__main__":
    sys.exit(main())
